"""Value choices of the flags ckpt emits or lints, read statically from an unpacked vLLM source tree."""

import ast
import json
import sys
from pathlib import Path

root = Path(sys.argv[1])


def lit(path, name, seen=()):
    p = root / path
    if not p.exists() or name in seen:
        return None
    t = ast.parse(p.read_text())
    for n in t.body:
        tgt = getattr(n, "targets", [getattr(n, "target", None)])[0]
        if getattr(tgt, "id", None) == name and isinstance(getattr(n, "value", None), ast.Subscript):
            sl = n.value.slice
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            vals = []
            for e in elts:
                if isinstance(e, ast.Constant):
                    vals.append(e.value)
                elif isinstance(e, ast.Name):
                    vals += lit(path, e.id, (*seen, name)) or []
            return vals
    return None


def dict_keys(path, name):
    p = root / path
    if not p.exists():
        return None
    t = ast.parse(p.read_text())
    for n in t.body:
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name and isinstance(n.value, ast.Dict):
            return [k.value for k in n.value.keys]


def enum_members(path, cls):
    p = root / path
    if not p.exists():
        return None
    t = ast.parse(p.read_text())
    for n in t.body:
        if isinstance(n, ast.ClassDef) and n.name == cls:
            return [
                s.targets[0].id
                for s in n.body
                if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name) and s.targets[0].id.isupper()
            ]


out = {
    "kv_cache_dtype": lit("config/cache.py", "CacheDType"),
    "moe_backend": lit("config/kernel.py", "MoEBackend"),
    "linear_backend": lit("config/kernel.py", "LinearBackend"),
    "attention_backend": enum_members("v1/attention/backends/registry.py", "AttentionBackendEnum"),
    "reasoning_parser": dict_keys("reasoning/__init__.py", "_REASONING_PARSERS_TO_REGISTER"),
    "tool_call_parser": dict_keys("tool_parsers/__init__.py", "_TOOL_PARSERS_TO_REGISTER")
    or dict_keys("entrypoints/openai/tool_parsers/__init__.py", "_TOOL_PARSERS_TO_REGISTER"),
    "speculative_method": lit("config/speculative.py", "SpeculativeMethod"),
    "mtp_model_types": lit("config/speculative.py", "MTPModelTypes"),
    "quantization": lit("model_executor/layers/quantization/__init__.py", "QuantizationMethods"),
    "dtype": lit("config/model.py", "ModelDType"),
    "mm_encoder_tp_mode": lit("config/multimodal.py", "MMEncoderTPMode"),
    "mamba_dtype": lit("config/cache.py", "MambaDType"),
}
print(json.dumps(out))
