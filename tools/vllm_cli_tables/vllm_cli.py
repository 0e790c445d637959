"""Statically list the flags `vllm serve` registers, from an unpacked vLLM source tree (no import, no torch)."""

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1])  # .../vllm


def parse(p):
    return ast.parse(p.read_text(), str(p))


# class name -> {field: annotation source}, plus base names
classes = {}
aliases = {}  # module-level Name = <expr src>
for p in ROOT.rglob("*.py"):
    try:
        tree = parse(p)
    except (OSError, SyntaxError, ValueError):  # a file that is not Python source (or not UTF-8) has no options
        continue
    src = p.read_text()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fields = {}
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    fields[st.target.id] = ast.get_source_segment(src, st.annotation)
            classes.setdefault(node.name, []).append(
                (fields, [ast.get_source_segment(src, b) for b in node.bases], str(p))
            )
        elif isinstance(node, (ast.Assign,)) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            aliases.setdefault(node.targets[0].id, ast.get_source_segment(src, node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            aliases.setdefault(node.target.id, ast.get_source_segment(src, node.value))
        elif isinstance(node, ast.TypeAlias) if hasattr(ast, "TypeAlias") else False:
            aliases.setdefault(node.name.id, ast.get_source_segment(src, node.value))


def field_ann(cls, field, seen=None):
    for fields, bases, _ in classes.get(cls, []):
        if field in fields:
            return fields[field]
        for b in bases:
            b = b.split("[")[0].split(".")[-1]
            r = field_ann(b, field)
            if r:
                return r
    return None


def all_fields(cls):
    out = {}
    for fields, bases, _ in classes.get(cls, []):
        for b in bases:
            out.update(all_fields(b.split("[")[0].split(".")[-1]))
        out.update(fields)
    return out


def kind_of(ann):
    if ann is None:
        return "value"
    a = ann.replace(" ", "")
    toks = set(re.findall(r"[A-Za-z_]+", a))
    if {"bool", "str", "None"} == set(a.split("|")):
        return "optional"
    if "bool" in toks and not a.startswith(("dict", "list", "Literal")):
        return "bool"
    return "value"


flags = {}


def add(names, kind, src):
    key = [n for n in names if n.startswith("--")]
    key = key[0] if key else names[0]
    flags[key] = {"aliases": [n for n in names if n != key], "kind": kind, "from": src}


def scan_add_arguments(path, kwargs_map_cls):
    src = path.read_text()
    tree = parse(path)
    var2cls = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "get_kwargs"
        ):
            t = node.targets[0]
            if isinstance(t, ast.Name) and node.value.args and isinstance(node.value.args[0], ast.Name):
                var2cls[t.id] = node.value.args[0].id
    var2sub = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Subscript)
            and isinstance(node.targets[0], ast.Name)
        ):
            var2sub[node.targets[0].id] = node.value
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Subscript)
            and isinstance(node.value.value, ast.Call)
            and getattr(node.value.value.func, "id", None) == "get_kwargs"
        ):
            pass
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not names or not names[0].startswith("-"):
                continue
            kind = "value"
            explicit = {k.arg: k.value for k in node.keywords if k.arg}
            star = [k.value for k in node.keywords if k.arg is None]
            field_cls = None
            expanded = []
            for s in star:
                if isinstance(s, ast.Dict):
                    expanded += [v for k, v in zip(s.keys, s.values, strict=True) if k is None]
                elif isinstance(s, ast.Name) and s.id in var2sub:
                    expanded.append(var2sub[s.id])
                else:
                    expanded.append(s)
            for s in expanded:
                if isinstance(s, ast.Subscript) and isinstance(s.value, ast.Name):
                    cls = var2cls.get(s.value.id)
                    fld = s.slice.value if isinstance(s.slice, ast.Constant) else None
                    if cls and fld:
                        field_cls = (cls, fld)
                elif isinstance(s, ast.Subscript) and isinstance(s.value, ast.Subscript):
                    # get_kwargs(VllmConfig)["x"] stored in var
                    pass
            if field_cls:
                kind = kind_of(field_ann(*field_cls))
            if "action" in explicit:
                a = ast.get_source_segment(src, explicit["action"])
                if "store_true" in a or "store_false" in a:
                    kind = "switch"
                elif "BooleanOptional" in a:
                    kind = "bool"
            if (
                "nargs" in explicit
                and ast.get_source_segment(src, explicit["nargs"]) in ('"?"', "'?'")
                and "const" in explicit
            ):
                kind = "optional"
            add(names, kind, f"{path.name}:{node.lineno}" + (f" {field_cls[0]}.{field_cls[1]}" if field_cls else ""))
    return var2cls


scan_add_arguments(ROOT / "engine/arg_utils.py", None)
for _p in ("entrypoints/common/cli_args.py", "entrypoints/openai/cli_args.py"):
    if (ROOT / _p).exists():
        scan_add_arguments(ROOT / _p, None)
# Frontend dataclass args
for cls in ("FrontendArgs",):
    for name, ann in all_fields(cls).items():
        if name.startswith("_"):
            continue
        add([f"--{name.replace('_', '-')}"], kind_of(ann), f"cli_args.py {cls}.{name}")
json.dump(flags, sys.stdout, indent=1, sort_keys=True)
