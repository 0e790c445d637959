from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..detect.resolve import component_of
from ..knowledge.kv_scales import KvRuntime, attention, kv_runtime
from ._kv import kv_tensors
from .base import Context, Finding, Rule, files_of, register
from .ck304_quant_config_mismatch import _kv_word, _nested

# Segments between the attention module and a KV scale: `self_attn.k_proj.k_scale`, `self_attn.attn.k_scale`.
_OWNER = re.compile(r"^(?P<attn>.+?)(\.(k_proj|v_proj|q_proj|qkv_proj|qkqkv_proj|attn))?\.[a-z_]+$")


def attention_layers(ctx: Context) -> list[str]:
    """Attention modules of the language model: parents of q/k/qkv projections named like an attention block
    (rules/kv_scales.toml [attention])."""
    where = attention()
    out = set()
    for name in ctx.ckpt.modules:
        parent, _, last = name.rpartition(".")
        if (
            last in where.projections
            and parent.rsplit(".", 1)[-1] in where.blocks
            and component_of(name, ctx.det.family) == "text"
        ):
            out.add(parent)
    return sorted(out)


def _owner(name: str) -> str:
    m = _OWNER.match(name)
    return m["attn"] if m else name.rsplit(".", 1)[0]


def _raw_scheme(ctx: Context) -> Any:
    kv = ctx.det.config.get("kv_cache_scheme")
    return kv if kv is not None else ctx.det.config.get("kv_cache_quant_algo")


def _is_dynamic(scheme: Any) -> bool:
    return isinstance(scheme, dict) and scheme.get("dynamic") is True


def _kv_phrase(kv: str | None) -> str:
    """`fp8` -> "fp8 KV-cache quantization"; None -> "no KV-cache quantization" (no article to get wrong)."""
    return f"{kv} KV-cache quantization" if kv else "no KV-cache quantization"


def _layers_without_scales(ctx: Context, layers: list[str], tensors: list[str]) -> list[tuple[str, list[str]]]:
    """(attention layer, the k/v scales it lacks) for layers with neither a scale nor a projection output scale."""
    owners: dict[str, set[str]] = {}
    for n in tensors:
        owners.setdefault(_owner(n), set()).add(n.rsplit(".", 1)[-1])
    missing = []
    for layer in layers:
        have = owners.get(layer, set())
        if "kv_scale" in have:
            continue
        lacks = [
            s
            for s in ("k_scale", "v_scale")
            if s not in have and f"{layer}.{s[0]}_proj.output_scale" not in ctx.ckpt.tensors
        ]
        if lacks:
            missing.append((layer, lacks))
    return missing


@register
class KvCacheConfigMismatch(Rule):
    """KV-cache scales and the declared KV-cache quantization disagree.

    What it catches
    - KV-cache scale tensors (`k_scale`, `v_scale`, `kv_scale`, q/k/v projection `output_scale`) with no KV
      scheme in the effective config (`kv_cache_scheme` / `kv_cache_quant_algo`);
    - a declared static KV scheme with no scale tensors, or with scales for only some attention layers;
    - config.json and hf_quant_config.json declaring different KV-cache quantization (vLLM reads only
      config.json when it has a quantization_config, vllm/transformers_utils/config.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.1); docs/reference/failures.md #13);
    - a declared scheme the runtime does not implement: compressed-tensors accepts only 8-bit float, symmetric,
      `tensor` / `attn_head` schemes (vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.6)); ModelOpt algos other than FP8 / NVFP4 are unknown to vLLM
      and fall back to an unquantized cache (1.4).
    Spelling problems of the scale names themselves (legacy `kv_scale`) are kv-scale-naming (CK203).

    Why it matters
    vLLM picks the KV-cache dtype from the declaration, not from the tensors. Scales without a declaration are
    ignored unless you pass `--kv-cache-dtype fp8` (and compressed-tensors drops them silently even then); a
    declaration without scales runs the FP8 cache with scale 1.0 (accuracy loss on layers whose K/V exceed the FP8
    range); an unsupported scheme refuses to start or silently serves BF16.

    Anti-pattern
    Calibrating KV scales with one tool and writing the config with another; editing hf_quant_config.json but not
    config.json; deleting "unused" `k_scale` tensors.

    Fix
    Declare the KV scheme the scales were calibrated for in config.json (`kv_cache_scheme: {num_bits: 8, type:
    float, strategy: tensor, dynamic: false, symmetric: true}` for compressed-tensors; `kv_cache_quant_algo: FP8` for
    ModelOpt) and keep hf_quant_config.json identical, or re-export with KV calibration.
    """

    code = "CK303"
    slug = "kv-cache-config-mismatch"
    severity = "warning"
    title = "KV-cache scales and declared KV-cache quantization disagree"

    def check(self, ctx: Context) -> Iterable[Finding]:
        disagree = list(self._configs_disagree(ctx))
        yield from disagree
        scheme = _raw_scheme(ctx)
        tensors = kv_tensors(ctx)
        source = ctx.det.config.source or "config.json"
        if ctx.det.kv_cache is None:
            # Declared only in hf_quant_config.json: the disagreement above already says the cache runs unquantized.
            if tensors and not disagree:
                yield self._undeclared(ctx, tensors, source)
            return
        yield from self._unsupported(ctx, scheme, source)
        if _is_dynamic(scheme):
            return
        layers = attention_layers(ctx)
        if not tensors:
            if layers:
                yield self._no_scales(ctx, layers, source)
            return
        missing = _layers_without_scales(ctx, layers, tensors)
        if missing:
            yield self._some_layers_without_scales(ctx, layers, missing, source)

    def _undeclared(self, ctx: Context, tensors: list[str], source: str) -> Finding:
        if ctx.det.producer == "compressed-tensors":
            effect = (
                "compressed-tensors without a kv_cache_scheme ignores them silently, so even "
                "`--kv-cache-dtype fp8` runs with scale 1.0"
            )
        else:
            effect = "they are used only if you pass `--kv-cache-dtype fp8`; otherwise the cache stays BF16"
        return self.finding(
            f"{len(tensors)} KV-cache scale tensor(s) are present but {source} declares no KV-cache "
            f"quantization: {effect}. Declare the KV scheme they were calibrated for.",
            tensors=tensors,
            files=files_of(ctx.ckpt, tensors) | {ctx.det.config.file},
            details={"declared": None, "kv_scale_tensors": len(tensors)},
        )

    def _no_scales(self, ctx: Context, layers: list[str], source: str) -> Finding:
        return self.finding(
            f"{source} declares {_kv_phrase(ctx.det.kv_cache)} but the checkpoint has no k_scale / v_scale "
            f"tensors: vLLM quantizes K and V with scale 1.0 on all {len(layers)} attention layer(s). "
            f"Re-export with KV-cache calibration, or drop the declaration.",
            files=[ctx.det.config.file],
            count=len(layers),
            details={"declared": ctx.det.kv_cache, "attention_layers": len(layers)},
        )

    def _some_layers_without_scales(
        self, ctx: Context, layers: list[str], missing: list[tuple[str, list[str]]], source: str
    ) -> Finding:
        shown = "; ".join(f"`{layer}` lacks {', '.join(lacks)}" for layer, lacks in missing[:3])
        return self.finding(
            f"{len(missing)} of {len(layers)} attention layer(s) have no KV-cache scale although {source} declares "
            f"a {ctx.det.kv_cache} KV cache ({shown}): those layers run with scale 1.0. Re-export with KV-cache "
            f"calibration over every layer.",
            tensors=[f"{layer}.{s}" for layer, lacks in missing for s in lacks],
            files=[ctx.det.config.file],
            count=len(missing),
            details={"declared": ctx.det.kv_cache, "layers_without_scales": [m[0] for m in missing[:200]]},
        )

    def _unsupported(self, ctx: Context, scheme: Any, source: str) -> Iterable[Finding]:
        rt = kv_runtime(ctx.det.runtime.id)
        if rt is None:
            return
        if ctx.det.producer == "compressed-tensors" and isinstance(scheme, dict):
            yield from self._ct_unsupported(ctx, rt, scheme, source)
        elif ctx.det.producer == "modelopt":
            yield from self._modelopt_unsupported(ctx, rt, scheme, source)

    def _ct_unsupported(self, ctx: Context, rt: KvRuntime, scheme: dict[str, Any], source: str) -> Iterable[Finding]:
        problems = []
        if scheme.get("type") != rt.ct_kv_type or scheme.get("num_bits") != rt.ct_kv_num_bits:
            problems.append(f"type {scheme.get('type')} with {scheme.get('num_bits')} bits")
        strategy = scheme.get("strategy", "tensor")
        if strategy not in rt.ct_kv_strategies:
            problems.append(f"strategy {strategy}")
        if scheme.get("symmetric", True) is False:
            problems.append("asymmetric")
        if problems:
            yield self.finding(
                f"{source} declares kv_cache_scheme with {', '.join(problems)}; {ctx.det.runtime.name} supports "
                f"only num_bits={rt.ct_kv_num_bits}, type={rt.ct_kv_type}, symmetric, strategy "
                f"{' or '.join(rt.ct_kv_strategies)}, and refuses to start (NotImplementedError).",
                files=[ctx.det.config.file],
                count=1,
                severity="error",
                details={"kv_cache_scheme": scheme},
            )

    def _modelopt_unsupported(self, ctx: Context, rt: KvRuntime, scheme: Any, source: str) -> Iterable[Finding]:
        word = _kv_word(scheme)
        accepted = rt.modelopt_kv_algos
        if isinstance(scheme, dict):
            word = {"float8": "fp8", "float4": "nvfp4"}.get(f"{scheme.get('type')}{scheme.get('num_bits')}", word)
        if word and word not in accepted:
            yield self.finding(
                f"{source} declares KV-cache algo {word!r}, which {ctx.det.runtime.name} does not map (it knows "
                f"{', '.join(accepted)}): it logs \"Unknown kv_cache_quant_algo\" and runs an unquantized KV cache.",
                files=[ctx.det.config.file],
                count=1,
                details={"kv_cache_quant_algo": word, "accepted": list(accepted)},
            )

    def _configs_disagree(self, ctx: Context) -> Iterable[Finding]:
        cfg = (ctx.ckpt.config or {}).get("quantization_config")
        hfq = ctx.ckpt.hf_quant_config
        if not isinstance(cfg, dict) or not isinstance(hfq, dict):
            return
        nested = _nested(hfq)
        kv_a = _kv_word(cfg.get("kv_cache_scheme", cfg.get("kv_cache_quant_algo")))
        kv_b = _kv_word(nested.get("kv_cache_quant_algo", nested.get("kv_cache_scheme")))
        if kv_a != kv_b and (kv_a or kv_b):
            yield self.finding(
                f"config.json declares {_kv_phrase(kv_a)}, hf_quant_config.json declares {_kv_phrase(kv_b)}; "
                f"vLLM reads config.json and ignores hf_quant_config.json, so the KV cache runs "
                f"{'as ' + kv_a if kv_a else 'unquantized'}. Make them agree.",
                files=["config.json", "hf_quant_config.json"],
                count=1,
                details={"field": "kv_cache", "config.json": kv_a, "hf_quant_config.json": kv_b},
            )
