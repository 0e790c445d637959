from __future__ import annotations

import fnmatch
from collections import Counter

import orjson
import typer

from .app import TextOrJson, app, emit


@app.command("inspect")
def inspect_command(
    target: str = typer.Argument(
        ..., help="Checkpoint folder, .safetensors file, or Hub repo (org/name, org/name@revision, hf://org/name)."
    ),
    tensors: str | None = typer.Option(None, "--tensors", "-t", help="List tensors whose name matches this glob."),
    format: TextOrJson = typer.Option(TextOrJson.text, "--format", "-f", help="text or json.", case_sensitive=False),
    runtime: str | None = typer.Option(None, "--runtime", help="Runtime profile (default vllm-0.33)."),
    revision: str | None = typer.Option(
        None, "--revision", help="Hub repos: branch, tag or commit sha (default: main)."
    ),
) -> None:
    """Census of a checkpoint: dtypes per component, the per-layer scheme table, and tensor listings."""
    from ..pipeline import analyze
    from ..report.text import _size, checkpoint_lines, hub_lines

    # A census of one shard is a fair question; its verdict lines describe that shard only.
    result = analyze(target, runtime=runtime, headers_only=True, revision=revision, lone_shard=True)
    target = result.report.target  # a Hub repo is named with the revision asked for
    ckpt, det = result.checkpoint, result.detection
    from ..detect.resolve import component_lookup

    component_of = component_lookup(det.family)
    census: Counter[tuple[str, str]] = Counter()
    census_bytes: Counter[tuple[str, str]] = Counter()
    for t in ckpt.tensors.values():
        key = (component_of(t.name), t.dtype)
        census[key] += 1
        census_bytes[key] += t.nbytes
    listed = [t for t in ckpt.tensors.values() if tensors and fnmatch.fnmatchcase(t.name, tensors)]
    layers = _layer_table(det)
    from ..plan import memory_figures

    memory = memory_figures(result)
    if format == TextOrJson.json:
        from .. import __version__
        from ..report.model import SCHEMA_VERSION

        data = {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "ckpt", "version": __version__},
            "target": target,
            "checkpoint": dict(result.report.checkpoint),
            **({"hub": result.report.extra["hub"]} if "hub" in result.report.extra else {}),
            "census": [
                {"component": c, "dtype": d, "tensors": n, "bytes": census_bytes[(c, d)]}
                for (c, d), n in sorted(census.items())
            ],
            "modules": [
                {
                    "name": r.name,
                    "component": r.component,
                    "declared": r.declared.label,
                    "disk": r.disk.label,
                    "covered_by": r.covered_by,
                    "group": r.group,
                }
                for r in det.rows
            ],
            "layers": layers,
            "memory": memory,
        }
        if tensors:
            data["tensors"] = [
                {
                    "name": t.name,
                    "dtype": t.dtype,
                    "shape": list(t.shape),
                    "shard": t.shard,
                    "data_offsets": [t.begin, t.end],
                }
                for t in listed
            ]
        emit(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    out = [
        f"ckpt inspect {target}",
        *checkpoint_lines(dict(result.report.checkpoint)),
        *hub_lines(result.report.extra.get("hub")),
        "",
        "dtype census:",
    ]
    for (comp, dtype), n in sorted(census.items()):
        out.append(f"  {comp:<8} {dtype:<12} {n:>8,} tensors  {_size(census_bytes[(comp, dtype)]):>10}")
    out += ["", *_memory_lines(memory), "", "schemes per layer (declared by the config -> on disk):"]
    for layer in layers:
        out.append(f"  {layer['layer']:<48} {layer['summary']}")
    if tensors:
        out += ["", f"tensors matching {tensors!r}: {len(listed)}"]
        for t in listed:
            out.append(f"  {t.name:<70} {t.dtype:<8} {list(t.shape)!s:<18} {t.shard}")
    emit("\n".join(out) + "\n")


def _memory_lines(memory: dict) -> list[str]:
    """Weights and KV figures (ckpt plan gives the budget on a GPU)."""
    w = memory["weights"]
    out = [
        "memory (ckpt plan TARGET --hardware ID for the fit on a GPU):",
        f"  weights   {w['bytes']:,} B (" + ", ".join(f"{k} {v:,} B" for k, v in w["by_component"].items()) + ")",
    ]
    kv = memory.get("kv_cache")
    if kv is None:
        return [*out, f"  KV cache  unknown: {memory.get('kv_cache_unknown')}"]
    out.append(
        f"  KV cache  {kv['bytes_per_token']:,} B per token ({kv['dtype']}, {kv['attention_layers']} "
        f"attention layer{'s' if kv['attention_layers'] != 1 else ''}"
        + (f", {kv['sliding_window_layers']} sliding-window" if kv["sliding_window_layers"] else "")
        + ")"
    )
    if memory["state"]["layers"]:
        out.append(
            f"  state     {memory['state']['bytes_per_sequence']:,} B per sequence "
            f"({memory['state']['layers']} linear-attention layer{'s' if memory['state']['layers'] != 1 else ''})"
        )
    return out


def _layer_table(det) -> list[dict]:
    """Rows grouped by layer prefix (up to and including the layer index), with scheme counts."""
    import re

    groups: dict[str, Counter[str]] = {}
    pattern = re.compile(r"^(.*?\.(?:layers|blocks|h)\.\d+)\.")
    for r in det.rows:
        m = pattern.match(r.name)
        layer = m.group(1) if m else r.name
        label = (
            r.declared.label
            if r.declared == r.disk or (not r.disk.quantized and not r.declared.quantized)
            else (f"{r.declared.label} (disk: {r.disk.label})")
        )
        groups.setdefault(layer, Counter())[label] += 1

    def key(name: str):  # natural sort so layer 10 follows layer 9
        return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]

    return [
        {"layer": layer, "schemes": dict(c), "summary": ", ".join(f"{n}x {lbl}" for lbl, n in sorted(c.items()))}
        for layer, c in sorted(groups.items(), key=lambda kv: key(kv[0]))
    ]
