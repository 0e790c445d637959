"""Per-layer cache specs from a model config, as vLLM 0.33 builds them (one rank's share under tensor parallelism).

Attention layers store bytes per token (full attention, sliding window, MLA latent); GatedDeltaNet layers store a
fixed recurrent state per sequence. The formulas and their vLLM sources are in rules/memory.toml and
docs/reference/kv-cache.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..knowledge.memory import KvDtype, memory
from ..knowledge.modules import model_config
from . import facts
from .limits import first_int

FULL, SLIDING, MLA, GDN = "full_attention", "sliding_attention", "mla", "linear_attention"


@dataclass(frozen=True)
class LayerCache:
    """What one decoder layer keeps per rank: `token_bytes` for attention kinds, `state_bytes` for recurrent ones."""

    index: int
    kind: str
    token_bytes: int = 0
    kv_heads: int = 0  # per rank (MLA: 1)
    head_size: int = 0
    head_size_v: int = 0
    sliding_window: int | None = None
    state_bytes: int = 0
    state_shapes: tuple[tuple[int, ...], ...] = ()
    state_dtypes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CacheModel:
    layers: tuple[LayerCache, ...]
    model_dtype: str
    kv_dtype: str  # the resolved --kv-cache-dtype
    kv_dtype_reason: str
    notes: tuple[str, ...] = ()

    def of(self, *kinds: str) -> tuple[LayerCache, ...]:
        return tuple(layer for layer in self.layers if layer.kind in kinds)


def model_dtype(cfg: Mapping[str, Any], top: Mapping[str, Any]) -> str:
    """The dtype vLLM runs the model in with --dtype auto: the config's `dtype` / `torch_dtype` (float32 checkpoints
    are served in bfloat16)."""
    for src in (cfg, top):
        for key in ("dtype", "torch_dtype"):
            v = src.get(key)
            if isinstance(v, str) and facts.dtype_bytes(v) is not None:
                return "bfloat16" if v == "float32" else v
    return "bfloat16"


def layer_kinds(cfg: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """One kind per decoder layer, and notes on how they were read."""
    n = first_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    if n is None or n <= 0:
        raise UsageError("the config gives no num_hidden_layers: cannot size the KV cache")
    limit = model_config().count_limit
    if n > limit:  # one cache spec is built per layer: a count past any released model is refused, not looped over
        raise UsageError(
            f"the config gives num_hidden_layers {n:,}, past any released model (ckpt believes up to {limit:,}): "
            f"cannot size the KV cache; set it to the decoder layers the checkpoint holds"
        )
    notes: list[str] = []
    if cfg.get("kv_lora_rank") is not None:
        return [MLA] * n, notes
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == n and all(isinstance(t, str) for t in types):
        out = []
        for t in types:
            if t in ("linear_attention", "mamba", "gated_delta_net"):
                out.append(GDN)
            elif t in ("sliding_attention", "sliding_window", "local_attention"):
                out.append(SLIDING)
            else:
                out.append(FULL)
        return out, notes
    interval = first_int(cfg, "full_attention_interval")
    if interval:
        return [FULL if (i + 1) % interval == 0 else GDN for i in range(n)], notes
    window = first_int(cfg, "sliding_window")
    if window and cfg.get("use_sliding_window", True) is not False:
        notes.append(f"sliding_window {window} without layer_types: every layer is taken as sliding-window")
        return [SLIDING] * n, notes
    return [FULL] * n, notes


def _attention_layer(i: int, kind: str, cfg: Mapping[str, Any], tp: int, kv: KvDtype, model_bytes: int) -> LayerCache:
    heads = first_int(cfg, "num_attention_heads", "n_head")
    if not heads:
        raise UsageError("the config gives no num_attention_heads: cannot size the KV cache")
    if kind == MLA:
        head_size = int(cfg["kv_lora_rank"]) + (first_int(cfg, "qk_rope_head_dim") or 0)
        kv_heads, head_size_v = 1, 0  # one latent vector per token, replicated on every rank (max_tp_shards 1)
    else:
        kv_total = first_int(cfg, "num_key_value_heads", "num_kv_heads") or heads
        kv_heads = max(1, kv_total // tp)  # ModelConfig.get_num_kv_heads: ranks beyond the KV heads hold replicas
        head_size = first_int(cfg, "head_dim") or int(cfg["hidden_size"]) // heads
        head_size_v = head_size
    if kv.mla_only and kind != MLA:
        raise UsageError(f"--kv-cache-dtype {kv.id} is for MLA models only")
    elem = model_bytes if kv.layout == "model" else kv.element_bytes
    if kv.layout in ("model", "dense"):
        content = (head_size + head_size_v) * elem
    elif kv.layout == "per-token-head":
        content = (head_size + head_size_v) * elem + 2 * 4
    elif kv.layout == "int4-per-token-head":
        content = (head_size // 2 + head_size_v // 2) * elem + 2 * 4
    elif kv.layout == "nvfp4":
        # K and V each stored as fp4 data (2 values per byte) followed by one fp8 scale per 16 values.
        if kind == MLA:
            raise UsageError(
                f"--kv-cache-dtype {kv.id} on an MLA model is not modelled by the memory plan "
                f"(MLA's quantized layouts are fp8_ds_mla / nvfp4_ds_mla)"
            )
        content = sum(h // 2 + h // 16 for h in (head_size, head_size_v)) * elem
    elif kv.layout == "opaque":
        content = kv.token_bytes
    else:
        raise AssertionError(f"memory.toml: unknown kv layout {kv.layout!r}")
    window = first_int(cfg, "sliding_window") if kind == SLIDING else None
    if kind == SLIDING and not window:
        raise UsageError("the config marks sliding-window layers but gives no sliding_window")
    return LayerCache(
        index=i,
        kind=kind,
        token_bytes=kv_heads * content,
        kv_heads=kv_heads,
        head_size=head_size,
        head_size_v=head_size_v,
        sliding_window=window,
    )


def _gdn_layer(i: int, cfg: Mapping[str, Any], tp: int, dtype: str) -> LayerCache:
    nk, nv = first_int(cfg, "linear_num_key_heads"), first_int(cfg, "linear_num_value_heads")
    dk, dv = first_int(cfg, "linear_key_head_dim"), first_int(cfg, "linear_value_head_dim")
    kernel = first_int(cfg, "linear_conv_kernel_dim")
    if nk is None or nv is None or dk is None or dv is None or kernel is None:
        raise UsageError(
            "linear-attention layers without linear_num_key_heads / linear_num_value_heads / "
            "linear_key_head_dim / linear_value_head_dim / linear_conv_kernel_dim: cannot size the state"
        )
    conv_dim = dk * nk * 2 + dv * nv
    rule = memory().gated_delta_net
    conv_dtype = dtype if rule.conv_dtype == "model" else rule.conv_dtype
    ssm = cfg.get(rule.ssm_dtype_config_key)
    ssm_dtype = ssm if isinstance(ssm, str) and facts.dtype_bytes(ssm) is not None else conv_dtype
    shapes: tuple[tuple[int, ...], ...] = ((kernel - 1, conv_dim // tp), (nv // tp, dv, dk))
    dtypes = (conv_dtype, ssm_dtype)
    state = sum(_prod(s) * int(facts.dtype_bytes(d) or 0) for s, d in zip(shapes, dtypes, strict=True))
    return LayerCache(index=i, kind=GDN, state_bytes=state, state_shapes=shapes, state_dtypes=dtypes)


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def resolve_kv_dtype(
    requested: str | None, quant_method: str | None, kv_word: str | None, dtype: str
) -> tuple[str, str]:
    """(--kv-cache-dtype value, why) for `auto` or an explicit value, as vLLM 0.33 resolves it."""
    if requested and requested != "auto":
        facts.kv_dtype(requested)
        return requested, "--kv-cache-dtype"
    rule = memory().kv_auto
    method = (quant_method or "").lower()
    if kv_word and method.startswith("modelopt"):
        mapped = rule.modelopt.get(kv_word.lower())
        if mapped:
            return mapped, f"auto: the ModelOpt config declares {kv_word.upper()} KV-cache quantization"
        return "auto", f"auto: the ModelOpt KV algorithm {kv_word!r} is unknown to vLLM, which falls back to {dtype}"
    if kv_word and method == "compressed-tensors":
        return rule.compressed_tensors, "auto: the compressed-tensors config declares a kv_cache_scheme"
    return "auto", f"auto: no KV-cache quantization declared, the model dtype ({dtype})"


def cache_model(
    cfg: Mapping[str, Any],
    top: Mapping[str, Any],
    *,
    tp: int,
    kv_request: str | None,
    quant_method: str | None,
    kv_word: str | None,
) -> CacheModel:
    dtype = model_dtype(cfg, top)
    kv_name, why = resolve_kv_dtype(kv_request, quant_method, kv_word, dtype)
    kv = facts.kv_dtype(kv_name)
    model_bytes = int(facts.dtype_bytes(dtype) or 2)
    kinds, notes = layer_kinds(cfg)
    layers = tuple(
        _gdn_layer(i, cfg, tp, dtype) if kind == GDN else _attention_layer(i, kind, cfg, tp, kv, model_bytes)
        for i, kind in enumerate(kinds)
    )
    shown = dtype if kv_name == "auto" else kv_name
    return CacheModel(layers=layers, model_dtype=dtype, kv_dtype=shown, kv_dtype_reason=why, notes=tuple(notes))
