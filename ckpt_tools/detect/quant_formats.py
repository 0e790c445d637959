"""The quantization formats beyond ModelOpt and compressed-tensors, resolved as vLLM 0.33 resolves them.

The facts (method names, overrides, accepted config values and vLLM's error texts) live in rules/formats.toml; this
module applies them: which `--quantization` value a checkpoint's `quant_method` becomes, whether the config class
accepts the config, the scheme it builds for one linear layer, and who wrote the checkpoint.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

from ..knowledge.quant_formats import NO_DEFAULT as _MISSING
from ..knowledge.quant_formats import QuantFormat, format_for, made_by_table
from ..model.schemes import UNQUANTIZED, Scheme
from .matching import RegexBudget


def _value(cfg: Mapping[str, Any], keys: tuple[str, ...], default: Any = _MISSING) -> Any:
    for k in keys:
        if k in cfg:
            return cfg[k]
    return default


def rejection(fmt: QuantFormat, cfg: Mapping[str, Any]) -> str | None:
    """vLLM's error text when `fmt.config_class.from_config` (and its __init__ checks) refuse this config."""
    for a in fmt.accepts:
        keys = (a.key, *a.aliases)
        value = _value(cfg, keys, a.default)
        if value is _MISSING:
            return f"Cannot find any of {list(keys)} in the model's quantization config."
        if a.unless_key is not None and cfg.get(a.unless_key) in a.unless_values:
            continue
        ok = value in a.values or (isinstance(value, str) and any(c in value for c in a.contains))
        if a.with_key is not None:
            other = cfg.get(a.with_key, _MISSING)
            ok = ok and other in a.with_values
        if not ok:
            fill = {k: str(v) for k, v in cfg.items() if isinstance(k, str)}
            fill[a.key] = str(value)
            return a.reject.format_map(_Fill(fill))
    if fmt.id == "auto-round":
        return _inc_scheme_rejection(cfg)
    return None


class _Fill(dict):
    def __missing__(self, key: str) -> str:
        return "None"


def _inc_scheme_rejection(cfg: Mapping[str, Any]) -> str | None:
    """INCConfig._validate_supported_quantization: per data type, the packing each scheme needs (inc.py)."""
    data_type = str(cfg.get("data_type", "int"))
    data_type = "fp" if data_type == "fp8" else data_type
    packing = cfg.get("packing_format")
    bits = cfg.get("bits")
    group = cfg.get("group_size")
    if data_type == "int":
        if packing not in (None, "auto_round:auto_gptq", "auto_round:auto_awq"):
            return (
                "INC int quantization only supports packing_format in ['auto_round:auto_awq', "
                f"'auto_round:auto_gptq'], but found packing_format={packing!r}."
            )
    elif "mx_fp" in data_type:
        if bits not in (4, 8):
            return f"INC MXFP only supports bits=4 or bits=8, but found bits={bits}."
        if group != 32:
            return f"INC MXFP only supports group_size=32, but found group_size={group}."
        if packing not in (None, "auto_round:llm_compressor"):
            return f"INC MXFP only supports packing_format='auto_round:llm_compressor', but found {packing!r}."
    elif data_type == "fp":
        if bits != 8:
            return f"INC block-wise FP8 only supports bits=8, but found bits={bits}."
        if not isinstance(group, list):
            return f"INC block-wise FP8 requires a 2-D group_size, but found group_size={group!r}."
    return None


def resolve_method(
    method: str, cfg: Mapping[str, Any], known_methods: Sequence[str], model_type: str | None = None
) -> tuple[str | None, str | None]:
    """(`--quantization` value, rejection) for a checkpoint of a formats.toml format."""
    fmt = format_for(method)
    if fmt is None:
        return None, None
    vllm_method = fmt.model_type_methods.get(model_type or "", fmt.vllm_method)
    if vllm_method not in known_methods:
        return None, f"Unknown quantization method: {method}"
    problem = rejection(fmt, cfg)
    return (None, problem) if problem else (vllm_method, None)


# ---- per-layer schemes --------------------------------------------------------------------------------------------


def _int_scheme(bits: Any, detail: str) -> Scheme:
    kind = "int8" if bits == 8 else "int4" if bits == 4 else None
    if kind is None:
        return Scheme("unknown", None, f"{bits}-bit {detail}")
    return Scheme(kind, "A16", detail)


def declared_scheme(
    method: str, cfg: Mapping[str, Any], name: str, vname: str, disk_quantized: bool, budget: RegexBudget
) -> tuple[Scheme, str | None]:
    """(scheme, the config entry that keeps it unquantized) for one linear `name` (vLLM-side `vname`)."""
    is_head = name == "lm_head" or name.endswith(".lm_head")
    if method == "mxfp4":
        # Mxfp4Config.get_quant_method: MoE experts take the MXFP4 method, every linear layer is unquantized.
        if name.endswith(".experts"):
            return Scheme("mxfp4", "A16", "gpt-oss"), None
        return UNQUANTIZED, "(Mxfp4Config quantizes only the MoE experts)"
    if method == "gptq":
        if is_head and not cfg.get("lm_head"):
            return UNQUANTIZED, "(lm_head: `lm_head` is false)"
        dynamic = cfg.get("dynamic")
        for pattern in dynamic if isinstance(dynamic, dict) else {}:
            if isinstance(pattern, str) and pattern.startswith("-:") and budget.match(pattern[2:], vname):
                return UNQUANTIZED, pattern
        listed = cfg.get("modules_in_block_to_quantize")
        if listed:
            flat = [x for x in _flatten(listed) if isinstance(x, str)]
            if not any(x in vname for x in flat):
                return UNQUANTIZED, "(not in modules_in_block_to_quantize)"
        elif not disk_quantized:
            # AutoGPTQConfig.maybe_update_config: without the list, the quantized layers are the ones whose
            # safetensors dtypes are not float.
            return UNQUANTIZED, "(stored in float: vLLM reads the layer as unquantized)"
        return _int_scheme(cfg.get("bits"), "GPTQ"), None
    if method == "awq":
        if is_head and not cfg.get("lm_head"):
            return UNQUANTIZED, "(lm_head: `lm_head` is false)"
        for entry in _strings(cfg.get("modules_to_not_convert")):
            if entry in vname:
                return UNQUANTIZED, entry
        return _int_scheme(cfg.get("bits", cfg.get("w_bit")), "AWQ"), None
    if method == "auto-round":
        extra = cfg.get("extra_config") or {}
        for key, sub in extra.items() if isinstance(extra, dict) else ():
            if (key == name or name.endswith("." + key)) and isinstance(sub, dict) and sub.get("bits", 16) >= 16:
                return UNQUANTIZED, key
        if is_head:
            return UNQUANTIZED, "(lm_head: AutoRound leaves the LM head unquantized)"
        blocks = cfg.get("block_name_to_quantize") or cfg.get("to_quant_block_names")
        blocks = blocks.split(",") if isinstance(blocks, str) else _strings(blocks)
        if blocks and not any(name.startswith(b) or vname.startswith(b) for b in blocks):
            return UNQUANTIZED, "(outside block_name_to_quantize)"
        data_type = str(cfg.get("data_type", "int"))
        bits = cfg.get("bits")
        act = "A16"
        act_bits = cfg.get("act_bits", 16)
        if isinstance(act_bits, int) and act_bits < 16:
            act = f"A{cfg.get('act_bits')}"
        if "mx_fp" in data_type:
            return Scheme("mxfp4" if bits == 4 else "mxfp8", act if act != "A16" else "A16", "AutoRound"), None
        if data_type.startswith("nv_fp"):
            return Scheme("nvfp4", act, "AutoRound"), None
        if data_type in ("fp", "fp8"):
            return Scheme("fp8", act, "AutoRound"), None
        if data_type == "int":
            fmt = str(cfg.get("packing_format", "auto_round:auto_gptq")).split(":")[-1]
            return _int_scheme(bits, f"AutoRound {fmt}"), None
        return Scheme("unknown", None, f"data_type {data_type}"), None
    if method == "fbgemm_fp8":
        # FBGEMMFp8Config: FP8 per-channel weights with dynamic per-token activations, except modules_to_not_convert.
        if is_head:
            return UNQUANTIZED, "(lm_head: FBGEMMFp8Config quantizes linear layers only)"
        for entry in _strings(cfg.get("modules_to_not_convert")):
            if entry in vname:
                return UNQUANTIZED, entry
        return Scheme("fp8", "A8", "channel"), None
    if method == "quark":
        for entry in _strings(cfg.get("exclude")):
            if entry in (vname, name) or (entry.startswith("re:") and budget.match(entry[3:], vname)):
                return UNQUANTIZED, entry
        layer_cfg = _quark_layer_config(cfg, name)
        return _quark_scheme(layer_cfg), None
    return UNQUANTIZED, None


def _quark_layer_config(cfg: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    layers = cfg.get("layer_quant_config") or {}
    if isinstance(layers, dict):
        for pattern, sub in layers.items():
            if isinstance(pattern, str) and fnmatch.fnmatch(name, pattern) and isinstance(sub, dict):
                return sub
    glob = cfg.get("global_quant_config")
    return glob if isinstance(glob, dict) else {}


def _quark_scheme(layer: Mapping[str, Any]) -> Scheme:
    """QuarkConfig._get_scheme_cls_from_config, in the detection vocabulary."""
    w, a = layer.get("weight"), layer.get("input_tensors")
    w = w[0] if isinstance(w, list) and len(w) == 1 else w
    a = a[0] if isinstance(a, list) and len(a) == 1 else a
    if not isinstance(w, dict):
        return UNQUANTIZED
    dtype = str(w.get("dtype", ""))
    adtype = str(a.get("dtype", "")) if isinstance(a, dict) else ""
    if dtype.startswith("fp8"):
        return Scheme("fp8", "A8" if adtype.startswith("fp8") else "A16", str(w.get("qscheme", "per_tensor")))
    if dtype == "fp4" and w.get("scale_format") == "e8m0":
        return Scheme("mxfp4", "A4" if adtype == "fp4" else "A8" if adtype.startswith("fp8") else "A16", "OCP MX")
    if dtype in ("int8", "uint8"):
        return Scheme("int8", "A8" if adtype in ("int8", "uint8") else "A16")
    if dtype in ("int4", "uint4"):
        return Scheme("int4", "A16")
    return Scheme("unknown", None, f"Quark {dtype or 'no'} weights")


def _strings(value: Any) -> list[str]:
    """The string entries of a config list (anything else in a hand-edited config holds none)."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _flatten(items: Any) -> list[Any]:
    out: list[Any] = []
    for x in items if isinstance(items, list) else [items]:
        out.extend(_flatten(x) if isinstance(x, list) else [x])
    return out


# ---- who wrote it ------------------------------------------------------------------------------------------------


def _dotted(cfg: Mapping[str, Any], path: str) -> Any:
    cur: Any = cfg
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def made_by(cfg: Mapping[str, Any] | None) -> str | None:
    """The tool that wrote this quantization config, with its version where the config records one."""
    if not isinstance(cfg, dict):
        return None
    for entry in made_by_table():
        key, _, want = entry.when_key.partition("=")
        got = _dotted(cfg, key)
        if got is None or (want and str(got).lower() != want):
            continue
        version = _dotted(cfg, entry.version_key) if entry.version_key else None
        return f"{entry.name} {version}" if isinstance(version, str) and version else entry.name
    return None
