"""Render the [cli] and [env] tables of a runtime profile from an unpacked vLLM source tree."""

import ast
import json
import subprocess
import sys
from pathlib import Path

root = Path(sys.argv[1])
flags = json.loads(subprocess.check_output([sys.executable, str(Path(__file__).with_name("vllm_cli.py")), str(root)]))
src = (root / "envs.py").read_text()
env = set()
for n in ast.walk(ast.parse(src)):
    if isinstance(n, ast.Dict):
        ks = [k.value for k in n.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        if len(ks) > 100:
            env |= set(ks)


def arr(xs):
    out = []
    line = "  "
    for x in xs:
        s = f'"{x}", '
        if len(line) + len(s) > 118:
            out.append(line.rstrip())
            line = "  "
        line += s
    out.append(line.rstrip().rstrip(','))
    return "[\n" + "\n".join(out) + "\n]"


kinds = {"value": [], "boolean": [], "switch": [], "optional_value": []}
m = {"value": "value", "bool": "boolean", "switch": "switch", "optional": "optional_value"}
for k, v in flags.items():
    kinds[m[v["kind"]]].append(k)
out = ["[cli]"]
for k, xs in kinds.items():
    out.append(f"{k} = {arr(sorted(xs))}")
out.append("\n[cli.aliases]")
out += [f'"{a}" = "{k}"' for k, v in sorted(flags.items()) for a in v["aliases"]]
out.append("\n[env]")
out.append(f"known = {arr(sorted(env))}")
print("\n".join(out))
