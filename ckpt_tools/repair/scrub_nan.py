"""`scrub-nan`: overwrite NaN bytes of 8-bit float scale tensors in place, and nothing else.

The NaN bytes are the ones the `nan-fp8-scale` rule counts (`ck501_nan_fp8_scale.nan_counts`, from the value
scan's statistics: E4M3 0x7F / 0xFF, E4M3FNUZ 0x80, E5M2 0x7D-0x7F / 0xFD-0xFF, E8M0 0xFF; the OCP 8-bit floating point specification (docs/reference/vllm-0.33.md §6.1)).
Replacement values (`--value`):

- `max` (default): the format's largest finite value, E4M3 0x7E = 448. The NaN came from an unclamped cast of a
  value above 448 (NVIDIA/Model-Optimizer#1633), so saturating is the closest representable value; it is what
  current ModelOpt clamps to and what vllm-omni writes at load time (vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §6.2)).
- `zero`: +0, which silences the block (its weights dequantize to 0). For when a saturated block does more harm
  than a missing one; E8M0 has no zero, so MX scales only take `max`.

The data layout does not change, so only the NaN bytes are written (one write per run of adjacent NaN bytes). The
statistics say which tensors hold NaN codes and how many; their positions are found by re-reading only those tensors,
in chunks (`read.value_scan.read_pieces`), so planning holds one chunk at a time plus one patch per NaN byte.
"""

from __future__ import annotations

from types import MappingProxyType

from ..dtypes import MAX_FINITE_BYTE, NAN_BYTES, ZERO_BYTE
from ..errors import TargetError, UsageError
from ..model.checkpoint import Checkpoint
from ..model.tensors import TensorInfo
from ..model.values import value_dtype
from ..pipeline import Analysis
from ..read import open_source
from ..read.value_scan import read_pieces
from ..rules.ck501_nan_fp8_scale import NanFp8Scale, nan_counts
from .plan import BytePatch, Plan, ShardEdit, nothing
from .runner import Job, fixable_findings

NAME = "scrub-nan"
VALUES = {"max": MAX_FINITE_BYTE, "zero": ZERO_BYTE}


def job(value: str = "max") -> Job:
    if value not in VALUES:
        raise UsageError(f"--value must be one of {', '.join(VALUES)}, not {value!r}")

    def build(analysis: Analysis, target: str) -> Plan:
        return plan(analysis, target, value)

    return Job(NAME, NanFp8Scale.slug, True, build)


def nan_positions(blob: bytes, nan: frozenset[int]) -> list[tuple[int, int]]:
    """(position, byte) of every NaN byte, found with `bytes.find` so clean megabytes cost no Python loop."""
    out = []
    for b in nan:
        needle = bytes([b])
        i = blob.find(needle)
        while i >= 0:
            out.append((i, b))
            i = blob.find(needle, i + 1)
    return sorted(out)


def _patches(
    target: str, ckpt: Checkpoint, counts: dict[str, int], table: dict[str, int]
) -> dict[str, list[BytePatch]]:
    """Shard -> one patch per NaN byte of the flagged tensors, found by re-reading just those tensors."""
    source = open_source(target)
    by_shard: dict[str, list[TensorInfo]] = {}
    for name in sorted(counts):
        t = ckpt.tensors[name]
        by_shard.setdefault(t.shard, []).append(t)
    per_shard: dict[str, list[BytePatch]] = {}
    for shard_name, tensors in by_shard.items():
        patches = per_shard.setdefault(shard_name, [])
        for t, offset, piece in read_pieces(source, ckpt.shard_by_name[shard_name], tensors):
            encoding = value_dtype(t)  # MX scales stored as U8 are E8M0
            patches.extend(
                BytePatch(t.name, offset + pos, old, table[encoding])
                for pos, old in nan_positions(piece, NAN_BYTES[encoding])
            )
        found: dict[str, int] = {}
        for p in patches:
            found[p.tensor] = found.get(p.tensor, 0) + 1
        for t in tensors:
            if found.get(t.name, 0) != counts[t.name]:
                raise TargetError(
                    f"{target}: `{t.name}` changed while it was being read ({counts[t.name]} NaN "
                    f"byte(s) counted, {found.get(t.name, 0)} found); run the command again"
                )
        patches.sort(key=lambda p: (p.tensor, p.position))
    return per_shard


def plan(analysis: Analysis, target: str, value: str) -> Plan:
    ckpt = analysis.checkpoint
    if ckpt.values is None:
        raise TargetError(f"{target}: scale values were not read ({ckpt.values_skipped or 'no value scan'})")
    if not fixable_findings(analysis, NanFp8Scale.slug):
        return nothing(NAME, "no nan-fp8-scale finding: no NaN byte in any 8-bit float scale tensor")
    counts = nan_counts(ckpt)
    table = VALUES[value]
    replacement: dict[str, str] = {}
    for name in sorted(counts):
        t = ckpt.tensors[name]
        encoding = value_dtype(t)
        new = table.get(encoding)
        if new is None:
            raise UsageError(f"`{name}` is {encoding}, which has no {value} value to write; use --value max")
        replacement[encoding] = f"0x{new:02X}"
    per_shard = _patches(target, ckpt, counts, table)
    edits = {shard: ShardEdit(patches=tuple(ps)) for shard, ps in per_shard.items()}
    total = sum(counts.values())
    lines = tuple(
        f"{name}: {counts[name]} NaN byte(s) -> {replacement[value_dtype(ckpt.tensors[name])]}"
        for name in sorted(counts)
    )
    return Plan(
        job=NAME,
        summary=f"replace {total} NaN byte(s) in {len(counts)} scale tensor(s) with the {value} value "
        f"({', '.join(f'{d} {b}' for d, b in sorted(replacement.items()))})",
        edits=MappingProxyType(edits),
        lines=lines,
        details={
            "value": value,
            "replacement": replacement,
            "nan_bytes": dict(sorted(counts.items())),
            "total_nan_bytes": total,
        },
    )
