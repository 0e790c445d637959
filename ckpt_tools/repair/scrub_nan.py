"""`scrub-nan`: overwrite NaN bytes of 8-bit float scale tensors in place, and nothing else.

The NaN bytes are the ones the `nan-fp8-scale` finding counts (its `details`: per tensor the NaN count, the shard,
the data offsets and the 8-bit encoding, from the value scan's statistics: E4M3 0x7F / 0xFF, E4M3FNUZ 0x80, E5M2 0x7D-0x7F / 0xFD-0xFF, E8M0 0xFF; the OCP 8-bit floating point specification (docs/reference/vllm-0.33.md §6.1)).
Replacement values (`--value`):

- `max` (default): the format's largest finite value, E4M3 0x7E = 448. The NaN came from an unclamped cast of a
  value above 448 (NVIDIA/Model-Optimizer#1633), so saturating is the closest representable value; it is what
  current ModelOpt clamps to and what vllm-omni writes at load time (vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §6.2)).
- `zero`: +0, which silences the block (its weights dequantize to 0). For when a saturated block does more harm
  than a missing one; E8M0 has no zero, so MX scales only take `max`.

The data layout does not change, so only the NaN bytes are written (one write per run of adjacent NaN bytes). The
finding says which tensors hold NaN codes and how many; their positions are found by re-reading only those tensors,
in chunks (`read.value_scan.read_pieces`), so planning holds one chunk at a time plus one patch per NaN byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ..dtypes import MAX_FINITE_BYTE, NAN_BYTES, ZERO_BYTE
from ..errors import TargetError, UsageError
from ..model.checkpoint import Checkpoint
from ..model.tensors import TensorInfo
from ..pipeline import Analysis
from ..read import open_source
from ..read.value_scan import read_pieces
from ..rules.base import Finding
from ..rules.ck501_nan_fp8_scale import NanFp8Scale
from .edits import BytePatch, Plan, ShardEdit, nothing
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


@dataclass(frozen=True)
class Flagged:
    """One scale tensor of the `nan-fp8-scale` finding's plan: where its bytes are, how they are encoded, and how
    many NaN codes the value scan counted in them."""

    tensor: TensorInfo
    encoding: str
    nan_bytes: int


def flagged_scales(ckpt: Checkpoint, findings: Sequence[Finding], target: str) -> list[Flagged]:
    """The tensors the findings' plans (`details["nan_bytes"]` and `details["scales"]`) name, checked against the
    headers just read: a plan that names a tensor the header does not hold at those offsets is refused."""
    out: dict[str, Flagged] = {}
    for f in findings:
        scales = f.details.get("scales") or {}
        for name, count in f.details.get("nan_bytes", {}).items():
            where = scales.get(name)
            t = ckpt.tensors.get(name)
            if where is None or t is None or (t.shard, [t.begin, t.end]) != (where["shard"], where["data_offsets"]):
                raise TargetError(
                    f"{target}: the nan-fp8-scale finding names `{name}` where the header does not hold it; "
                    f"nothing was changed (run the command again)"
                )
            encoding = str(where.get("encoding"))
            if encoding not in NAN_BYTES:
                raise TargetError(f"{target}: `{name}` is {encoding}, which has no NaN byte scrub-nan knows")
            out[name] = Flagged(t, encoding, int(count))
    return [out[name] for name in sorted(out)]


def _patches(
    target: str, ckpt: Checkpoint, flagged: Sequence[Flagged], table: dict[str, int]
) -> dict[str, list[BytePatch]]:
    """Shard -> one patch per NaN byte of the flagged tensors, found by re-reading just those tensors."""
    source = open_source(target)
    by_shard: dict[str, list[Flagged]] = {}
    for item in flagged:
        by_shard.setdefault(item.tensor.shard, []).append(item)
    per_shard: dict[str, list[BytePatch]] = {}
    for shard_name, items in by_shard.items():
        patches = per_shard.setdefault(shard_name, [])
        by_name = {item.tensor.name: item for item in items}
        pieces = read_pieces(source, ckpt.shard_by_name[shard_name], [item.tensor for item in items])
        for t, offset, piece in pieces:
            encoding = by_name[t.name].encoding
            patches.extend(
                BytePatch(t.name, offset + pos, old, table[encoding])
                for pos, old in nan_positions(piece, NAN_BYTES[encoding])
            )
        found: dict[str, int] = {}
        for p in patches:
            found[p.tensor] = found.get(p.tensor, 0) + 1
        for item in items:
            name = item.tensor.name
            if found.get(name, 0) != item.nan_bytes:
                raise TargetError(
                    f"{target}: `{name}` changed while it was being read ({item.nan_bytes} NaN "
                    f"byte(s) counted, {found.get(name, 0)} found); run the command again"
                )
        patches.sort(key=lambda p: (p.tensor, p.position))
    return per_shard


def plan(analysis: Analysis, target: str, value: str) -> Plan:
    """The scrub of every tensor the `nan-fp8-scale` findings' plans name. The rule is not run again: its finding
    carries the tensors, their byte ranges and encodings, and the NaN counts the bytes are checked against."""
    ckpt = analysis.checkpoint
    skipped = next((s for s in analysis.report.skipped if s["slug"] == NanFp8Scale.slug), None)
    if skipped is not None:  # no finding then says nothing about NaN bytes
        raise TargetError(
            f"{target}: {NanFp8Scale.code} {NanFp8Scale.slug} did not run ({skipped['reason']}), so no NaN byte was "
            f"counted; nothing was changed"
        )
    findings = fixable_findings(analysis, NanFp8Scale.slug)
    if not findings:
        return nothing(NAME, "no nan-fp8-scale finding: no NaN byte in any 8-bit float scale tensor")
    flagged = flagged_scales(ckpt, findings, target)
    table = VALUES[value]
    replacement: dict[str, str] = {}
    for item in flagged:
        new = table.get(item.encoding)
        if new is None:
            raise UsageError(
                f"`{item.tensor.name}` is {item.encoding}, which has no {value} value to write; use --value max"
            )
        replacement[item.encoding] = f"0x{new:02X}"
    per_shard = _patches(target, ckpt, flagged, table)
    edits = {shard: ShardEdit(patches=tuple(ps)) for shard, ps in per_shard.items()}
    total = sum(item.nan_bytes for item in flagged)
    lines = tuple(
        f"{item.tensor.name}: {item.nan_bytes} NaN byte(s) -> {replacement[item.encoding]}" for item in flagged
    )
    return Plan(
        job=NAME,
        summary=f"replace {total} NaN byte(s) in {len(flagged)} scale tensor(s) with the {value} value "
        f"({', '.join(f'{d} {b}' for d, b in sorted(replacement.items()))})",
        edits=MappingProxyType(edits),
        lines=lines,
        details={
            "value": value,
            "replacement": replacement,
            "nan_bytes": {item.tensor.name: item.nan_bytes for item in flagged},
            "total_nan_bytes": total,
        },
    )
