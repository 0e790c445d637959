"""vLLM's own per-layer KV-cache specs for a checkpoint (runs in the side venv only; imports vllm_side first).

`kv_specs(path, kv_cache_dtype, tp)` builds the model class on the meta device inside a real `VllmConfig`, exactly
as the plan check needs it, and asks every attention and Mamba layer for its spec the way the GPU model runner does
(`layer.get_kv_cache_spec(vllm_config)` over `static_forward_context`). NVFP4 KV pages are packed by the attention
backend, not the layer: on the CPU platform the FlashInfer backend's `customize_spec` is applied to them, as the
GPU backend does (restated in `flashinfer_nvfp4_spec`: the backend module needs the flashinfer GPU package). The per-layer figures returned are before vLLM's hybrid page padding (which depends on the GPU
backend's kernel block sizes): bytes per token for attention layers, state bytes per sequence for Mamba layers.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any

import torch
import vllm_side as vs
from vllm.config import CacheConfig, LoadConfig, ParallelConfig, VllmConfig, set_current_vllm_config


@dataclass(frozen=True)
class LayerSpec:
    name: str
    spec_class: str
    token_bytes: int  # attention: page bytes / block size
    state_bytes: int  # Mamba: unpadded page bytes
    sliding_window: int | None
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()


@dataclass
class KvBuild:
    kv_cache_dtype: str | None = None  # the dtype vLLM resolved
    layers: list[LayerSpec] | None = None
    error: str | None = None
    specs: dict[str, Any] | None = None  # layer name -> vLLM's spec (NVFP4 pages packed as the GPU backend does)
    vllm_config: Any = None


def _resolved_dtype(mc: Any, requested: str) -> str:
    from vllm.utils.torch_utils import resolve_kv_cache_dtype_string

    return resolve_kv_cache_dtype_string(requested, mc)


def flashinfer_nvfp4_spec(spec: Any) -> Any:
    """FlashInferBackend.customize_spec (vllm/v1/attention/backends/flashinfer.py, 0.33.0) for NVFP4 KV: K and V
    as separate per-head slots of packed fp4 data plus fp8 block scales. The backend module imports flashinfer, a
    GPU package the side venv does not carry, so its three lines are restated here over vLLM's own helpers."""
    from vllm.utils.torch_utils import get_dtype_size, nvfp4_kv_cache_full_dim

    if spec.state_content_bytes is not None:
        return spec
    hs_k, hs_v = nvfp4_kv_cache_full_dim(spec.head_size), nvfp4_kv_cache_full_dim(spec.head_size_v)
    assert hs_k == hs_v
    return replace(spec, num_head_slots=2 * spec.num_kv_heads, state_content_bytes=hs_k * get_dtype_size(spec.dtype))


def _vllm_config(mc: Any, cache_dtype: str) -> VllmConfig:
    # The CPU platform alone forces a float32 SSM state when the host has AVX-512 BF16 (platforms/cpu.py); the GPU
    # platforms keep --mamba-ssm-cache-dtype auto. Hide the host feature so the layers see the GPU dtype.
    with vs._patched(torch.cpu, "_is_avx512_bf16_supported", lambda: False):
        return VllmConfig(
            model_config=mc,
            load_config=LoadConfig(),
            cache_config=CacheConfig(cache_dtype=cache_dtype),
            parallel_config=ParallelConfig(),
        )


def _cpu_refusal(error: str) -> bool:
    return "on CPU" in error or "CPU attention backend" in error


def kv_specs(path: str, kv_cache_dtype: str = "auto") -> KvBuild:
    """vLLM's specs for `path` at `kv_cache_dtype`. The CPU attention backends refuse some KV dtypes (nvfp4; fp8
    for MLA): then the layers are built with auto and each attention spec is rebuilt with the dtype, as the layer
    does on a GPU backend (Attention.get_kv_cache_spec: kv_cache_dtype_str_to_dtype, get_kv_quant_mode)."""
    out = _build(path, kv_cache_dtype, swap=False)
    if out.error and _cpu_refusal(out.error):
        out = _build(path, kv_cache_dtype, swap=True)
    return out


def _build(path: str, kv_cache_dtype: str, *, swap: bool) -> KvBuild:
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE, set_default_torch_dtype
    from vllm.v1.kv_cache_interface import AttentionSpec, MambaSpec, get_kv_quant_mode

    out = KvBuild()
    try:
        mc = vs.model_config(path)
        vc = _vllm_config(mc, "auto" if swap else _resolved_dtype(mc, kv_cache_dtype))
    except Exception as exc:  # noqa: BLE001
        out.error = vs.error_text(exc)
        return out
    vs._init_parallel(vc)
    qc = vc.quant_config
    with contextlib.ExitStack() as stack:
        if qc is not None:
            original = type(qc).get_quant_method

            def plain(self: Any, layer: Any, prefix: str) -> Any:
                # Weights are never loaded: linear layers are built plain; attention keeps the real KV method so
                # the kv_cache_scheme handling of the attention layer (auto -> fp8) runs as in a real load.
                if isinstance(layer, LinearBase):
                    return UnquantizedLinearMethod()
                try:
                    with vs.kernels_requested():
                        return original(self, layer, prefix)
                except Exception:  # noqa: BLE001 - a kernel selector: not what this check is about
                    return None

            stack.enter_context(vs._patched(type(qc), "get_quant_method", plain))
        stack.enter_context(set_current_vllm_config(vc))
        stack.enter_context(set_default_torch_dtype(mc.dtype))
        stack.enter_context(torch.device("meta"))
        try:
            initialize_model(vllm_config=vc, prefix="")
            layers, specs = [], {}
            for name, layer in vc.compilation_config.static_forward_context.items():
                if not isinstance(layer, AttentionLayerBase):
                    continue
                spec = layer.get_kv_cache_spec(vc)
                if spec is None:
                    continue
                if isinstance(spec, AttentionSpec) and swap:
                    spec = replace(
                        spec,
                        dtype=STR_DTYPE_TO_TORCH_DTYPE[kv_cache_dtype],
                        kv_quant_mode=get_kv_quant_mode(kv_cache_dtype),
                    )
                if isinstance(spec, AttentionSpec) and spec.kv_quant_mode.is_nvfp4:
                    spec = flashinfer_nvfp4_spec(spec)
                specs[name] = spec
                if isinstance(spec, MambaSpec):
                    layers.append(
                        LayerSpec(
                            name,
                            type(spec).__name__,
                            0,
                            spec.state_content_size_bytes,
                            None,
                            tuple(tuple(s) for s in spec.shapes),
                            tuple(str(d).removeprefix("torch.") for d in spec.dtypes),
                        )
                    )
                else:
                    page = spec.unpadded_page_size_bytes
                    layers.append(
                        LayerSpec(
                            name, type(spec).__name__, page // spec.block_size, 0, getattr(spec, "sliding_window", None)
                        )
                    )
            out.layers, out.specs, out.vllm_config = layers, specs, vc
            out.kv_cache_dtype = kv_cache_dtype if swap else vc.cache_config.cache_dtype
        except Exception as exc:  # noqa: BLE001
            out.error = vs.error_text(exc)
    return out


@dataclass(frozen=True)
class Capacity:
    """vLLM's pool and start-up figures for one model's per-layer specs and one KV budget."""

    in_flight_tokens: int
    groups: tuple[tuple[str, int], ...]  # (spec class, layers) per KV-cache group
    bytes_per_block: int
    num_blocks: int
    request_bytes: int  # _max_memory_usage_bytes_from_groups at max_model_len
    kv_cache_tokens: int
    max_concurrency: float


def capacity(
    build: KvBuild,
    *,
    block_size: int,
    state_page: int,
    available_memory: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    prefix_caching: bool,
    speculative_tokens: int,
) -> Capacity:
    """vLLM 0.33's own grouping, pool and capacity functions over `build`'s per-layer specs
    (`get_kv_cache_groups`, `DefaultKVCacheConfigBuilder.get_kv_cache_config_from_groups`,
    `_max_memory_usage_bytes_from_groups` in vllm/v1/core/kv_cache_planning.py, `get_kv_cache_capacity` in
    vllm/v1/core/kv_cache_utils.py). The hybrid block size and the padded state page are inputs: the GPU platform's
    `_align_hybrid_block_size` derives them from the GPU attention backend's kernel block sizes, which the CPU side
    venv cannot load. Every attention spec gets `block_size`; every Mamba spec gets `page_size_padded`, the cache
    mode and, as `MambaBase.get_kv_cache_spec` does, the speculative tokens as `num_speculative_blocks`."""
    from vllm.v1.core.kv_cache_planning import (
        DefaultKVCacheConfigBuilder,
        _max_memory_usage_bytes_from_groups,
        _pool_bytes_per_block_from_builder,
        get_kv_cache_groups,
    )
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity
    from vllm.v1.kv_cache_interface import AttentionSpec, MambaSpec

    vc = build.vllm_config
    mode = "align" if prefix_caching else "none"
    specs = {}
    for name, spec in (build.specs or {}).items():
        if isinstance(spec, MambaSpec):
            padded = state_page if state_page != spec.page_size_bytes else None
            spec = replace(
                spec,
                block_size=block_size,
                page_size_padded=padded,
                mamba_cache_mode=mode,
                num_speculative_blocks=speculative_tokens,
            )
        elif isinstance(spec, AttentionSpec):
            spec = replace(spec, block_size=block_size)
        specs[name] = spec
    saved = (
        vc.model_config.max_model_len,
        vc.scheduler_config.max_num_batched_tokens,
        vc.cache_config.block_size,
        vc.cache_config.mamba_cache_mode,
        vc.cache_config.kv_cache_layout,
        vc.scheduler_config.async_scheduling,
    )
    try:
        # The CPU platform runs without async scheduling; GPU serving has it on by default, so two batches are in
        # flight (VllmConfig.max_concurrent_batches), which sliding-window specs reserve for.
        vc.scheduler_config.async_scheduling = True
        vc.model_config.max_model_len = max_model_len
        vc.scheduler_config.max_num_batched_tokens = max_num_batched_tokens
        vc.cache_config.block_size = block_size
        vc.cache_config.mamba_cache_mode = mode
        vc.cache_config.kv_cache_layout = "NHD"  # FlashAttention's layout (layer-outer)
        builder = DefaultKVCacheConfigBuilder()
        with set_current_vllm_config(vc):
            groups = get_kv_cache_groups(vc, dict(specs))
            per_block = _pool_bytes_per_block_from_builder(builder, vc, groups)
            config = builder.get_kv_cache_config_from_groups(vc, groups, available_memory // per_block)
            needed = _max_memory_usage_bytes_from_groups(builder, vc, groups)
            tokens, concurrency = get_kv_cache_capacity(vc, config)
            in_flight = vc.max_in_flight_tokens
    finally:
        (
            vc.model_config.max_model_len,
            vc.scheduler_config.max_num_batched_tokens,
            vc.cache_config.block_size,
            vc.cache_config.mamba_cache_mode,
            vc.cache_config.kv_cache_layout,
            vc.scheduler_config.async_scheduling,
        ) = saved
    return Capacity(
        in_flight_tokens=in_flight,
        groups=tuple((type(g.kv_cache_spec).__name__, len(g.layer_names)) for g in groups),
        bytes_per_block=per_block,
        num_blocks=config.num_blocks,
        request_bytes=needed,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
    )
