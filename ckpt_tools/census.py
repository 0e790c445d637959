"""What `ckpt inspect` shows, as data: the dtype census per component, the per-layer scheme table, the memory figures
and a tensor listing. Built from an `Analysis` (headers only), rendered as JSON or text; judges nothing.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, filterfalse, repeat
from operator import attrgetter, eq, itemgetter, methodcaller, sub
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .detect.resolve import Detection, ModuleRow, RowClass, component_fixed_by, component_lookup, component_of
from .knowledge.hardware import Hardware
from .load.accounting import LoadAccounting
from .load.layers import LayerLoad, per_layer, tensors_per_layer, text_lines
from .model.checkpoint import Checkpoint
from .model.tensors import TensorInfo
from .report.model import SCHEMA_VERSION
from .report.text import checkpoint_lines, header_indent, hub_lines, human_size, terminal_width, wrap

if TYPE_CHECKING:
    from .pipeline import Analysis

LAYER = re.compile(r"^(.*?\.(?:layers|blocks|h)\.\d+)\.")  # a layer prefix, up to and including the layer index


@dataclass(frozen=True)
class CensusRow:
    """Tensors of one dtype in one component, and their bytes on disk."""

    component: str
    dtype: str
    tensors: int
    bytes: int


@dataclass(frozen=True)
class LayerRow:
    """The schemes of one layer's modules (declared by the config, with the on-disk one where it differs)."""

    layer: str
    schemes: Mapping[str, int]  # scheme label -> modules
    summary: str  # "2x W4A4 NVFP4, 1x unquantized"
    # hardware id -> the kernel families vLLM picks for the layer's quantized modules (ckpt_tools/kernels.py)
    kernel: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Inspection:
    """A checkpoint's census. `tensors` lists the tensors matching `pattern` (None when no pattern was given)."""

    target: str
    checkpoint: Mapping[str, Any]  # the report's `checkpoint` object
    hub: Mapping[str, Any] | None  # which Hub commit was read; None for a local target
    census: tuple[CensusRow, ...]
    modules: tuple[ModuleRow, ...]
    layers: tuple[LayerRow, ...]
    memory: Mapping[str, Any]  # `plan.memory_figures`: weights, KV cache per token, recurrent state
    pattern: str | None = None
    tensors: tuple[TensorInfo, ...] | None = None
    load: LoadAccounting | None = None  # what vLLM's loader does with each tensor (the load model)
    load_layers: tuple[LayerLoad, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The `ckpt inspect --format json` object."""
        from ._version import __version__

        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "ckpt", "version": __version__},
            "target": self.target,
            "checkpoint": dict(self.checkpoint),
            **({"hub": self.hub} if self.hub is not None else {}),
            "census": [
                {"component": r.component, "dtype": r.dtype, "tensors": r.tensors, "bytes": r.bytes}
                for r in self.census
            ],
            "modules": _module_dicts(self.modules),
            "layers": [
                {"layer": r.layer, "schemes": dict(r.schemes), "summary": r.summary, "kernel": dict(r.kernel)}
                for r in self.layers
            ],
            "memory": self.memory,
        }
        if self.load is not None:
            out["load"] = {
                "judge": self.load.judge,
                "judged_by": self.load.judged_by,
                "build_error": self.load.build_error,
                "layers": [r.to_dict() for r in self.load_layers],
            }
        if self.tensors is not None:
            out["tensors"] = [
                {
                    "name": t.name,
                    "dtype": t.dtype,
                    "shape": list(t.shape),
                    "shard": t.shard,
                    "data_offsets": [t.begin, t.end],
                }
                for t in self.tensors
            ]
        return out

    def render_text(self) -> str:
        """What `ckpt inspect` prints (header lines wrapped to the terminal, `report.text.terminal_width`)."""
        width = terminal_width()
        header = checkpoint_lines(dict(self.checkpoint)) + hub_lines(dict(self.hub) if self.hub is not None else None)
        out = [
            f"ckpt inspect {self.target}",
            *(part for line in header for part in wrap(line, width, header_indent(line))),
            "",
            "dtype census:",
        ]
        out += [
            f"  {r.component:<8} {r.dtype:<12} {r.tensors:>8,} tensors  {human_size(r.bytes):>10}" for r in self.census
        ]
        out += ["", *memory_lines(self.memory), "", "schemes per layer (declared by the config -> on disk):"]
        # The kernels are the header's (one line per GPU family), said once: a layer's kernel is its schemes'.
        out += [f"  {r.layer:<48} {r.summary}" for r in self.layers]
        if self.load is not None:
            out += ["", *(part for line in text_lines(self.load, self.load_layers) for part in wrap(line, width, 6))]
        if self.tensors is not None:
            out += ["", f"tensors matching {self.pattern!r}: {len(self.tensors)}"]
            out += [f"  {t.name:<70} {t.dtype:<8} {list(t.shape)!s:<18} {t.shard}" for t in self.tensors]
        return "\n".join(out) + "\n"


def _module_dicts(rows: Sequence[ModuleRow]) -> list[dict[str, Any]]:
    """The JSON `modules` objects."""
    return [
        {
            "name": row.name,
            "component": row.component,
            "declared": row.declared.label,
            "disk": row.disk.label,
            "covered_by": row.covered_by,
            "group": row.group,
        }
        for row in rows
    ]


def inspection(analysis: Analysis, pattern: str | None = None, hardware: Sequence[str] = ()) -> Inspection:
    """The census of an analysed checkpoint; `pattern` (a glob over tensor names) adds a tensor listing; kernel facts
    (the header's `kernels` lines, the per-layer `kernel` field) name `hardware` (profile ids), else the GPUs the
    runtime runs on, else every profile."""
    from .kernels import kernel_facts, kernel_profiles, nvfp4_kernels, text_model_type
    from .knowledge.hardware import hardware as profile
    from .load.model import load_accounting
    from .plan import memory_figures

    ckpt, det, report = analysis.checkpoint, analysis.detection, analysis.report
    chosen = tuple(profile(h) for h in hardware)
    model_type = text_model_type(ckpt.config)
    checkpoint = dict(report.checkpoint)
    if chosen:
        checkpoint["nvfp4_kernels"] = nvfp4_kernels(det, chosen, model_type)
        checkpoint["kernels"] = kernel_facts(det, chosen, model_type)
    hub = report.extra.get("hub")
    # Only what is not a plain load, and the tensors per layer: the per-layer counts without a fate per tensor.
    load = load_accounting(ckpt, det, every_tensor=False)
    modules = ckpt.modules
    totals = tensors_per_layer(modules, map(len, map(attrgetter("tensors"), modules.values())))
    return Inspection(
        target=report.target,
        checkpoint=MappingProxyType(checkpoint),
        hub=hub,
        census=census(ckpt, det),
        modules=tuple(det.rows),
        layers=layer_table(det, kernel_profiles(det.runtime, chosen), model_type),
        memory=memory_figures(analysis),
        pattern=pattern or None,
        tensors=tuple(t for t in ckpt.tensors.values() if fnmatch.fnmatchcase(t.name, pattern)) if pattern else None,
        load=load,
        load_layers=per_layer(load, totals),
    )


def inspect_checkpoint(
    path_or_repo: str | os.PathLike[str],
    *,
    tensors: str | None = None,
    runtime: str | None = None,
    revision: str | None = None,
    hardware: str | Sequence[str] = (),
) -> Inspection:
    """Census of a checkpoint, as `ckpt inspect` prints it: headers only, and one shard of a sharded checkpoint is
    accepted (its census describes that shard). `tensors` is a glob over tensor names to list; `hardware` (a profile
    id or a list of them) picks the GPUs of the per-layer kernel column (default: the runtime's, else every one).

    Raises `ckpt_tools.errors.CkptError` when there is nothing to inspect, as `doctor` does."""
    from . import _inputs
    from .pipeline import analyze

    result = analyze(
        _inputs.target(path_or_repo, "path_or_repo"),
        runtime=_inputs.optional_id(runtime, "runtime"),
        headers_only=True,
        revision=revision,
        lone_shard=True,
    )
    return inspection(result, tensors, _inputs.ids(hardware, "hardware"))


def census(ckpt: Checkpoint, det: Detection) -> tuple[CensusRow, ...]:
    """Tensors and bytes per (component, dtype), sorted.

    Every tensor below an experts prefix that fixes the component (`component_fixed_by`) has that prefix's
    component, so those tensors are counted in bulk (C-level maps over the expert modules `Checkpoint.experts`
    holds); every other tensor is looked up by name."""
    family = det.family
    by_component: dict[str, list[TensorInfo]] = {}
    bulk: set[str] = set()  # the modules counted in bulk
    for prefix, group in ckpt.experts.items():
        if not component_fixed_by(prefix, family):
            continue
        held = list(chain.from_iterable(map(methodcaller("values"), group.experts.values())))
        bulk.update(map(attrgetter("name"), held))
        below = chain.from_iterable(map(methodcaller("values"), map(attrgetter("tensors"), held)))
        first = next(iter(held[0].tensors.values())).name
        by_component.setdefault(component_of(first, family), []).extend(below)
    lookup = component_lookup(family)
    modules = ckpt.modules
    for name in filterfalse(bulk.__contains__, modules):
        for t in modules[name].tensors.values():
            by_component.setdefault(lookup(t.name), []).append(t)
    counts: dict[tuple[str, str], int] = {}
    sizes: dict[tuple[str, str], int] = {}
    for component, tensors in by_component.items():
        dtypes = list(map(attrgetter("dtype"), tensors))
        nbytes = list(map(sub, map(attrgetter("end"), tensors), map(attrgetter("begin"), tensors)))  # TensorInfo.nbytes
        per_dtype = Counter(dtypes)
        left = sum(nbytes)
        *others, last = per_dtype  # the last dtype's bytes are what the others leave: one pass fewer
        for dtype in others:
            size = sum(compress(nbytes, map(eq, dtypes, repeat(dtype))))
            counts[(component, dtype)], sizes[(component, dtype)] = per_dtype[dtype], size
            left -= size
        counts[(component, last)], sizes[(component, last)] = per_dtype[last], left
    return tuple(CensusRow(c, d, n, sizes[(c, d)]) for (c, d), n in sorted(counts.items()))


def layer_table(
    det: Detection, profiles: Sequence[Hardware] = (), model_type: str | None = None
) -> tuple[LayerRow, ...]:
    """Module rows grouped by layer prefix, with scheme counts, in natural order (layer 10 after layer 9), and the
    kernel families vLLM picks per profile for each layer.

    Counted per row class (`Detection.classes`): a class of several members is the expert projections of one experts
    prefix, and the layer pattern cannot match the expert id or the projection (the segment before the id is
    `experts`, not a layer word), so every member has the layer its first member has, or, with no match, each is its
    own layer. Labels and layers keep the order of their first row by name, as a pass over the rows gives."""
    from .kernels import row_kernels

    entries: list[tuple[str, str, str, int, RowClass]] = []  # (first row, layer, label, modules, class)
    for c in det.classes:
        same = c.declared == c.disk or (not c.disk.quantized and not c.declared.quantized)
        label = c.declared.label if same else f"{c.declared.label} (disk: {c.disk.label})"
        m = LAYER.match(c.names[0])
        if m:
            entries.append((c.names[0], m.group(1), label, len(c.names), c))
        else:
            entries.extend((n, n, label, 1, c) for n in c.names)
    entries.sort(key=itemgetter(0))
    groups: dict[str, Counter[str]] = {}
    members: dict[str, list[RowClass]] = {}
    for _, layer, label, n, c in entries:
        members.setdefault(layer, []).append(c)
        groups.setdefault(layer, Counter())[label] += n

    def natural(name: str) -> list[int | str]:
        return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]

    return tuple(
        LayerRow(
            layer,
            MappingProxyType(dict(c)),
            ", ".join(f"{n}x {lbl}" for lbl, n in sorted(c.items())),
            MappingProxyType(row_kernels(det, members[layer], profiles, model_type)),
        )
        for layer, c in sorted(groups.items(), key=lambda kv: natural(kv[0]))
    )


def memory_lines(memory: Mapping[str, Any]) -> list[str]:
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
    state = memory["state"]
    if state["layers"]:
        out.append(
            f"  state     {state['bytes_per_sequence']:,} B per sequence "
            f"({state['layers']} linear-attention layer{'s' if state['layers'] != 1 else ''})"
        )
    return out
