"""How to read a scheme (model/schemes.py) from config args or from the tensors on disk."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ..dtypes import FLOAT_HIGH_PRECISION
from ..model.modules import Module
from ..model.schemes import UNQUANTIZED, Scheme

# ---- compressed-tensors QuantizationArgs ------------------------------------------------------------------------


def _args(x: Any) -> Mapping[str, Any] | None:
    return x if isinstance(x, dict) else None


def is_nvfp4_args(args: Mapping[str, Any] | None) -> bool:
    """vLLM `_is_nvfp4_format`: tensor_group, float, 4 bits, group 16, symmetric (vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.2))."""
    return bool(
        args
        and args.get("strategy") == "tensor_group"
        and args.get("type") == "float"
        and args.get("num_bits") == 4
        and args.get("group_size") == 16
        and args.get("symmetric", True)
    )


def is_mxfp4_args(args: Mapping[str, Any] | None) -> bool:
    return bool(
        args
        and args.get("strategy") == "group"
        and args.get("type") == "float"
        and args.get("num_bits") == 4
        and args.get("group_size") == 32
    )


def ct_scheme(weights: Any, inputs: Any, fmt: str | None) -> Scheme:
    """The scheme vLLM's `_get_scheme_from_parts` picks for one config group (vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.2)), in our vocabulary.

    Returns kind `unknown` with the reason as detail where vLLM raises.
    """
    w, a = _args(weights), _args(inputs)
    if w is None:
        return UNQUANTIZED
    if is_nvfp4_args(w):
        if a is None:
            return Scheme("nvfp4", "A16")
        if is_nvfp4_args(a):
            return Scheme("nvfp4", "A4")
        return Scheme("unknown", None, "NVFP4 weights need NVFP4 or no input quantization")
    if is_mxfp4_args(w):
        return Scheme("mxfp4", "A8" if a and a.get("num_bits") == 8 else "A4")
    wtype, wbits, strategy = w.get("type"), w.get("num_bits"), w.get("strategy")
    if wtype == "float" and wbits == 8:
        if w.get("group_size") == 32 and strategy == "group":
            return Scheme("mxfp8", "A8")
        act = "A8" if a is not None else "A16"
        return Scheme("fp8", act, strategy)
    if wtype == "int" and wbits in (4, 8):
        kind = "int4" if wbits == 4 else "int8"
        if a is None:
            return Scheme(kind, "A16", strategy)
        return Scheme(kind, f"A{a.get('num_bits', '?')}", strategy)
    return Scheme("unknown", None, f"{wtype} {wbits}-bit weights")


def modelopt_scheme(algo: str | None) -> Scheme:
    algo = (algo or "").upper()
    table = {
        "NVFP4": Scheme("nvfp4", "A4"),
        "W4A16_NVFP4": Scheme("nvfp4", "A16"),
        "NVFP4_AWQ": Scheme("nvfp4", "A4", "AWQ"),
        "FP8": Scheme("fp8", "A8", "tensor"),
        "FP8_PER_CHANNEL_PER_TOKEN": Scheme("fp8", "A8", "channel"),
        "FP8_PB_WO": Scheme("fp8", "A16", "block"),
        "FP8_BLOCK_SCALES": Scheme("fp8", "A16", "block"),
        "MXFP8": Scheme("mxfp8", "A8"),
        "W4A16_AWQ": Scheme("int4", "A16", "AWQ"),
        "W4A8_AWQ": Scheme("int4", "A8", "AWQ"),
        "W8A16": Scheme("int8", "A16"),
        "W8A8_SQ_PER_CHANNEL": Scheme("int8", "A8"),
    }
    return table.get(algo, Scheme("unknown", None, algo or None))


# ---- what the tensors say ----------------------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _shared_scheme(kind: str, activation: str | None = None, detail: str | None = None) -> Scheme:
    """One `Scheme` object per distinct value: disk_scheme runs once per module, and its answers are a handful."""
    return Scheme(kind, activation, detail)


def disk_scheme(module: Module) -> Scheme:
    """Read a module's scheme from its tensor names and dtypes alone."""
    t = module.tensors
    weight = t.get("weight_packed") or t.get("weight")
    if weight is None and "qweight" in t:
        # GPTQ / AWQ / AutoRound int packing: I32 words along the input (GPTQ) or output (AWQ) dimension; the bit
        # width is the config's.
        return (
            _shared_scheme("int4", "A16", "qweight")
            if t["qweight"].dtype == "I32"
            else _shared_scheme("unknown", None, f"{t['qweight'].dtype} qweight")
        )
    if weight is None:
        blocks = t.get("gate_up_proj_blocks") or t.get("down_proj_blocks")
        if blocks is not None:  # gpt-oss fused experts: U8 FP4 blocks with U8 E8M0 scales
            return (
                _shared_scheme("mxfp4", "A16", "gpt-oss")
                if blocks.dtype == "U8"
                else _shared_scheme("unknown", None, f"{blocks.dtype} blocks")
            )
        return _shared_scheme("unknown", None, "no weight")
    scale = t.get("weight_scale")
    has_input = "input_scale" in t or "input_global_scale" in t
    if weight.dtype in FLOAT_HIGH_PRECISION:
        return _shared_scheme("unquantized", None, weight.dtype)
    if weight.dtype == "U8" and scale is not None and scale.dtype == "F8_E4M3":
        return _shared_scheme("nvfp4", "A4" if has_input else "A16")
    if weight.dtype == "F4":
        return _shared_scheme("nvfp4", "A4" if has_input else "A16")
    if weight.dtype == "U8" and scale is not None and scale.dtype in ("U8", "F8_E8M0"):
        return _shared_scheme("mxfp4", None)
    if weight.dtype in ("F8_E4M3", "F8_E5M2"):
        if scale is not None and scale.dtype in ("U8", "F8_E8M0"):
            return _shared_scheme("mxfp8", "A8")
        scale = scale or t.get("weight_scale_inv")
        strategy = None
        if scale is not None:
            if scale.numel == 1:
                strategy = "tensor"
            elif (len(scale.shape) >= 2 and scale.shape[-1] == 1 and len(scale.shape) == 2) or len(scale.shape) == 1:
                strategy = "channel"
            else:
                strategy = "block"
        return _shared_scheme("fp8", "A8" if has_input else None, strategy)
    if weight.dtype == "I32" and "weight_packed" in t:
        # pack-quantized int weights; 4 vs 8 bits needs the values of `weight_shape`, so the config decides that.
        return _shared_scheme("int4", "A16" if not has_input else "A8", "packed")
    if weight.dtype == "I8":
        # compressed-tensors int-quantized stores int4 W4A8 weights unpacked in I8 too; the config says which.
        return _shared_scheme("int8", "A8" if has_input else "A16")
    return _shared_scheme("unknown", None, f"{weight.dtype} weight")
