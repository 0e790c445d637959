from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from itertools import compress, repeat
from operator import itemgetter, or_, truediv
from typing import Any

from ..knowledge.modules import fused_groups_for
from ..knowledge.scales import global_scales
from ..model.tensors import TensorInfo
from ..model.values import WIDE_FLOAT_DTYPES, TensorStats
from ._memo import once_per_detection
from ._value_columns import member_scalars, member_table
from ._values import usable_scalar
from .base import Context, Finding, Rule, files_of, register

RELATIVE_TOLERANCE = 1e-3  # F32 rounding of identical amaxes stays far below this
_LIMIT = 1 + RELATIVE_TOLERANCE  # `_compare`'s bound on the largest / smallest ratio
ERROR_RATIO = 1.5  # above this a shard's weights dequantize at least a third off: garbage, not accuracy loss
_PARENT, _LAST = itemgetter(0), itemgetter(2)  # of a module name's `rpartition(".")`


@cache
def _global_suffixes() -> frozenset[str]:
    g = global_scales()
    return frozenset(g.weight + g.input)


@dataclass(frozen=True)
class FusedBlock:
    """Fused layers with the same number of NVFP4 shards on disk, as columns: `columns[j][i]` is a shard module of
    the layer `layers[i]` ((parent, vLLM fused name)) as its index in `MemberScalars.names`, in no particular
    order; `classes` are the row classes (indices) those modules belong to."""

    layers: list[tuple[str, str]]
    columns: list[list[int]]
    classes: frozenset[int]


@once_per_detection
def fused_blocks(ctx: Context) -> list[FusedBlock]:
    """Every fused layer with at least two NVFP4 shards on disk (including each expert's gate/up pair, vLLM's w13),
    in blocks of equal shard counts.

    WHY per class: a class's rows share their disk scheme, so only NVFP4 classes are looked at; their members'
    parents and last segments are split in C, and a layer whose every shard is on disk (the usual case) is matched
    with its siblings by dict lookups in C. Layers missing a shard are listed one by one. Header facts only: made
    while the scan runs (`FusedScaleMismatch.prepare`)."""
    table = member_table(ctx)
    group_of = {shard: g for g in fused_groups_for(ctx.det.family.id) for shard in g.shards}
    found: dict[str, tuple[list[str], list[int], set[int]]] = {}  # last segment -> (parents, members, classes)
    for k, c in enumerate(table.classes):
        if c.disk.kind != "nvfp4":
            continue
        parts = list(map(str.rpartition, c.names, repeat(".")))
        lasts = list(map(_LAST, parts))
        kinds = set(lasts)
        members = range(table.starts[k], table.starts[k + 1])
        for last in kinds.intersection(group_of):
            parents, indices, classes = found.setdefault(last, ([], [], set()))
            classes.add(k)
            if len(kinds) == 1:
                parents.extend(map(_PARENT, parts))
                indices.extend(members)
            else:
                parents.extend(compress(map(_PARENT, parts), map(last.__eq__, lasts)))
                indices.extend(compress(members, map(last.__eq__, lasts)))
    by_fused: dict[str, list[str]] = {}
    for last in found:
        by_fused.setdefault(group_of[last].fused, []).append(last)
    blocks: list[FusedBlock] = []
    for fused, lasts in by_fused.items():
        used = frozenset().union(*(found[last][2] for last in lasts))
        blocks.extend(_blocks(fused, [found[last][:2] for last in lasts], used))
    return blocks


def _blocks(fused: str, shards: list[tuple[list[str], list[int]]], classes: frozenset[int]) -> list[FusedBlock]:
    """The layers of one fused name, given each shard kind's (parents, members)."""
    by_parent = [dict(zip(parents, members, strict=True)) for parents, members in shards]
    if any(len(d) != len(members) for d, (_parents, members) in zip(by_parent, shards, strict=True)):
        # Two modules of one kind under one parent (only a top-level `q_proj` beside a `.q_proj` can be): list
        # every layer's modules one by one.
        layers: dict[str, list[int]] = {}
        for parents, members in shards:
            for parent, member in zip(parents, members, strict=True):
                layers.setdefault(parent, []).append(member)
        return _by_count(fused, layers, classes)
    complete = set(by_parent[0]).intersection(*by_parent[1:])
    blocks = []
    if complete and len(shards) > 1:
        order = list(filter(complete.__contains__, by_parent[0]))  # the first kind's order: classes in name order
        columns = [list(map(d.__getitem__, order)) for d in by_parent]
        blocks.append(FusedBlock(list(zip(order, repeat(fused))), columns, classes))
    partial = set().union(*by_parent) - complete
    layers = {parent: [d[parent] for d in by_parent if parent in d] for parent in partial}
    return blocks + _by_count(fused, layers, classes)


def _by_count(fused: str, layers: dict[str, list[int]], classes: frozenset[int]) -> list[FusedBlock]:
    """Layers (parent -> shard members) with at least two shards, in blocks of equal shard counts."""
    by_count: dict[int, FusedBlock] = {}
    for parent, members in sorted(layers.items()):
        if len(members) > 1:
            block = by_count.setdefault(len(members), FusedBlock([], [[] for _ in members], classes))
            block.layers.append((parent, fused))
            for column, member in zip(block.columns, members, strict=True):
                column.append(member)
    return list(by_count.values())


def _mismatches(ctx: Context, suffixes: tuple[str, ...]) -> list[dict[str, Any]]:
    """The fused layers whose shards' usable global scales (`suffixes`) differ beyond F32 rounding, the largest ratio
    first (fused layers in name order, then `suffixes` order, among equals)."""
    if ctx.ckpt.values is None:
        return []
    table = member_scalars(ctx)
    found: list[tuple[tuple[str, str], int, dict[str, Any]]] = []
    measured = ctx.ckpt.values.tensors
    for block in fused_blocks(ctx):
        for position, suffix in enumerate(suffixes):
            column = table.column(suffix, block.classes)
            values = [list(map(column.__getitem__, members)) for members in block.columns]
            # WHY the screen is exact: a layer is compared only when all its shards' values are usable, and then
            # its largest / smallest ratio here is the one `_compare` computes (the same floats, the same division),
            # so every layer it would report passes. Unusable values are NaN (no division by zero); a layer they let
            # through is rejected by the per-layer test.
            if len(values) == 2:  # gate / up: the larger of a / b and b / a is max / min, without max's overhead
                a, b = values
                apart = map(or_, map(_LIMIT.__lt__, map(truediv, a, b)), map(_LIMIT.__lt__, map(truediv, b, a)))
            else:
                apart = map(_LIMIT.__lt__, map(truediv, map(max, *values), map(min, *values)))
            for i in compress(range(len(block.layers)), apart):
                layer = block.layers[i]
                shards = sorted(table.names[members[i]] for members in block.columns)
                mismatch = _layer_mismatch(measured, f"{layer[0]}.{layer[1]}", suffix, shards)
                if mismatch is not None:
                    found.append((layer, position, mismatch))
    found.sort(key=itemgetter(0, 1))
    out = [m for _layer, _position, m in found]
    out.sort(key=lambda m: -m["ratio"])
    return out


def _layer_mismatch(
    measured: Mapping[str, TensorStats], fused: str, suffix: str, shards: list[str]
) -> dict[str, Any] | None:
    """One fused layer's mismatch for one global-scale suffix, or None (a shard's scale absent or unusable, which
    other rules report, or the scales agree)."""
    vals: dict[str, float] = {}
    for s in shards:
        v = usable_scalar(measured.get(f"{s}.{suffix}"))
        if math.isnan(v):
            return None  # absent (other rules) or unusable (invalid-scale-value)
        vals[s] = v
    found: list[dict[str, Any]] = []
    _compare(found, fused, suffix, shards, vals)
    return found[0] if found else None


def _compare(found: list[dict[str, Any]], fused: str, suffix: str, shards: list[str], vals: dict[str, float]) -> None:
    """Record the fused layer when its shards' usable global scales differ beyond F32 rounding."""
    lo, hi = min(vals.values()), max(vals.values())
    ratio = hi / lo
    if ratio > 1 + RELATIVE_TOLERANCE:
        found.append(
            {
                "fused": fused,
                "suffix": suffix,
                "ratio": round(ratio, 4),
                "values": {s.rsplit(".", 1)[-1]: v for s, v in vals.items()},
                "tensors": [f"{s}.{suffix}" for s in shards],
            }
        )


def _example(m: dict) -> str:
    vals = ", ".join(f"{k} {v:.6g}" for k, v in m["values"].items())
    return f"`{m['fused']}` {m['suffix']}: {vals} (ratio {m['ratio']:.3g}x)"


@register
class FusedScaleMismatch(Rule):
    """Global scales of shards vLLM fuses (q/k/v, gate/up) differ.

    What it catches
    NVFP4 shards that vLLM loads into one fused parameter (q/k/v -> `qkv_proj`, gate/up -> `gate_up_proj` and each
    expert's `w13`, Qwen3.5 `in_proj_qkv`/`in_proj_z` -> `in_proj_qkvz`; rules/modules.toml) whose scalar weight
    global scales (`weight_scale_2`, `weight_global_scale`) differ, with the ratio between the largest and the
    smallest (docs/reference/failures.md #11). Differing input global scales are reported as info. Reads only the
    scalar F32 scale tensors (a few bytes each); skipped with `--headers-only`.

    Why it matters
    A fused layer has one global scale. vLLM keeps the maximum (the gate's for MoE experts) and only warns ("the
    weight global scale is different for parallel layers", "w1_weight_scale_2 must match w3_weight_scale_2.
    Accuracy may be affected."; vllm/model_executor/layers/quantization/compressed_tensors/schemes, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.3); vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.1); vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.2)): every other shard's weights dequantize off by its
    ratio. The model boots and answers worse; ratios of 2-10x have been seen in published checkpoints.

    Anti-pattern
    Independent per-tensor observers for fused shards (llm-compressor releases that do not know a model's fusion,
    e.g. Qwen3.5 `in_proj_qkv`/`in_proj_z`), or ModelOpt exports without synchronised amax for fused layers.

    Fix
    Re-export with the fused shards' global scales synchronised (llm-compressor `update_fused_layer_weight_global_
    scales`, ModelOpt's fused-amax sync), or requantize the affected shards to a shared global scale.
    """

    code = "CK502"
    slug = "fused-scale-mismatch"
    severity = "warning"
    title = "Fused shards have different global scales"
    needs_values = True

    @classmethod
    def wants_values(cls, tensor: TensorInfo) -> bool:
        """One-element float weight / input global scales (a few bytes each)."""
        return (
            tensor.dtype in WIDE_FLOAT_DTYPES
            and tensor.name.rpartition(".")[2] in _global_suffixes()
            and tensor.numel == 1
        )

    @classmethod
    def prepare(cls, ctx: Context) -> None:
        """The fused layers and the names of their shards' global scales, from the headers."""
        table = member_table(ctx)
        scales = global_scales()
        for block in fused_blocks(ctx):
            for suffix in (*scales.weight, *scales.input):
                for k in block.classes:
                    if suffix in table.suffixes[k]:
                        table.tensor_names(suffix, k)

    def check(self, ctx: Context) -> Iterable[Finding]:
        if not ctx.ckpt.values:
            return
        scales = global_scales()
        for suffixes, what, effect in (
            (
                scales.weight,
                "weight global scales",
                "vLLM keeps one scale per fused layer, so the other shards' weights dequantize off by up to {ratio:.3g}x. "
                "Re-export with synchronised global scales.",
            ),
            (
                scales.input,
                "input global scales",
                "vLLM quantizes the fused input with one scale (the max), which is correct but coarser for the other "
                "shards.",
            ),
        ):
            found = _mismatches(ctx, suffixes)
            if not found:
                continue
            worst = found[0]["ratio"]
            severity = "info" if suffixes is scales.input else "error" if worst >= ERROR_RATIO else "warning"
            yield self.finding(
                f"{len(found)} fused layer(s) have different {what} across their shards (worst {_example(found[0])}); "
                + effect.format(ratio=worst),
                tensors=[t for m in found for t in m["tensors"]],
                files=files_of(ctx.ckpt, (t for m in found for t in m["tensors"])),
                count=len(found),
                severity=severity,
                details={
                    "max_ratio": worst,
                    "layers": [{k: v for k, v in m.items() if k != "tensors"} for m in found[:200]],
                },
            )
