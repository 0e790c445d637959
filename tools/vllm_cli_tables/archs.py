"""The architectures a vLLM release serves, read statically from an unpacked wheel (no import, no torch).

    python tools/vllm_cli_tables/archs.py SRC/vllm > archs-X.toml

Prints the `[architectures]` table of a runtime profile: `supported` is the key set of
`vllm/model_executor/models/registry.py` `_VLLM_MODELS` (what `ModelRegistry.get_supported_archs()` returns), and
`previously_supported` maps architectures vLLM dropped to the last release that served them.
"""

import ast
import json
import sys
from pathlib import Path


def module_dicts(tree: ast.Module) -> dict[str, ast.Dict]:
    out = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Dict):
            out[target.id] = value
    return out


def keys_of(name: str, dicts: dict[str, ast.Dict]) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for key, value in zip(dicts[name].keys, dicts[name].values, strict=True):
        if key is None and isinstance(value, ast.Name):  # **_OTHER_MODELS
            out.update(keys_of(value.id, dicts))
        elif isinstance(key, ast.Constant) and isinstance(key.value, str):
            out[key.value] = value
    return out


def main() -> None:
    tree = ast.parse((Path(sys.argv[1]) / "model_executor" / "models" / "registry.py").read_text())
    dicts = module_dicts(tree)
    supported = sorted(keys_of("_VLLM_MODELS", dicts))
    previous = {}
    if "_PREVIOUSLY_SUPPORTED_MODELS" in dicts:
        for arch, value in keys_of("_PREVIOUSLY_SUPPORTED_MODELS", dicts).items():
            if isinstance(value, ast.Constant):
                previous[arch] = str(value.value)
    print("[architectures]")
    print("supported = [")
    line = "  "
    for arch in supported:
        item = json.dumps(arch) + ", "
        if len(line) + len(item) > 118:
            print(line.rstrip())
            line = "  "
        line += item
    print(line.rstrip())
    print("]")
    print()
    print("[architectures.previously_supported]")
    for arch, version in sorted(previous.items()):
        print(f"{arch} = {json.dumps(version)}")


if __name__ == "__main__":
    main()
