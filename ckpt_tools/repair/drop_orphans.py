"""`drop-orphans`: remove orphan scale tensors (docs/reference/failures.md #7) from the shard headers and the index.

The tensors come from the `orphan-scale` findings (`details["orphans"]`, the full list, else `tensors`), or from
`--tensor NAME` given explicitly. Only scales and zero points can be dropped (suffix roles in
`model.modules.SCALE_ROLES` and `zero_point`), so a typo cannot remove a weight. Dropping a tensor removes its bytes from the data region, which the format requires
to be covered exactly (safetensors src/tensor.rs, safetensors 0.8 (docs/reference/safetensors.md §8.2)), so each affected shard is rebuilt beside the original from the kept
tensors' byte ranges and renamed over it; other shards are not touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from ..errors import UsageError
from ..model.checkpoint import Checkpoint
from ..model.modules import ROLES, SCALE_ROLES, split_name
from ..pipeline import Analysis
from ..rules.ck302_orphan_scale import OrphanScale
from .edits import Plan, ShardEdit, nothing
from .runner import Job, fixable_findings

NAME = "drop-orphans"
# Quantization parameters only: scales and zero points (what the orphan-scale rule reports). Never a weight or bias.
DROPPABLE_ROLES = SCALE_ROLES | {"zero_point"}


def job(tensors: Sequence[str] = ()) -> Job:
    explicit = tuple(dict.fromkeys(t.strip() for t in tensors if t.strip()))

    def build(analysis: Analysis, target: str) -> Plan:
        if explicit:
            return plan(analysis.checkpoint, explicit, "--tensor")
        return plan(analysis.checkpoint, orphans_found(analysis), "the orphan-scale finding")

    return Job(NAME, OrphanScale.slug, False, build)


def orphans_found(analysis: Analysis) -> tuple[str, ...]:
    """The tensors the `orphan-scale` findings' plans name: `details["orphans"]` (the full list), else `tensors`."""
    names: dict[str, None] = {}
    for f in fixable_findings(analysis, OrphanScale.slug):
        listed = f.details.get("orphans") or f.tensors
        names.update(dict.fromkeys(listed))
    return tuple(names)


def plan(ckpt: Checkpoint, names: Sequence[str], source: str) -> Plan:
    if not names:
        return nothing(NAME, "no orphan-scale finding: every scale tensor belongs to a quantized weight")
    index_keys = ckpt.index.weight_map if ckpt.index is not None else {}
    missing = [n for n in names if n not in ckpt.tensors and n not in index_keys]
    if len(missing) == len(names):
        # Running the same command again after it succeeded (or after an interrupted run was completed) is fine.
        return nothing(NAME, f"none of the named tensors is in the checkpoint (already dropped?): {', '.join(names)}")
    if missing:
        raise UsageError(f"no tensor `{missing[0]}` in the checkpoint; nothing was changed")
    for name in names:
        suffix = split_name(name)[1]
        if ROLES.get(suffix) not in DROPPABLE_ROLES:
            raise UsageError(
                f"`{name}` is not a scale or zero point (suffix `{suffix}`); drop-orphans removes only those"
            )
    wanted = frozenset(names)
    edits = {}
    for shard in ckpt.shards:
        mine = frozenset(t.name for t in shard.tensors if t.name in wanted)
        if mine:
            edits[shard.name] = ShardEdit(drops=mine)
    dropped_bytes = sum(t.nbytes for s in ckpt.shards for t in s.tensors if t.name in wanted)
    return Plan(
        job=NAME,
        summary=f"drop {len(wanted)} orphan scale tensor(s) ({dropped_bytes:,} bytes) from {len(edits)} shard(s), "
        f"named by {source}",
        edits=MappingProxyType(edits),
        index_drops=wanted,
        lines=tuple(
            f"{name} ({ckpt.tensors[name].dtype} {list(ckpt.tensors[name].shape)}, {ckpt.tensors[name].shard})"
            if name in ckpt.tensors
            else f"{name} (index only)"
            for name in sorted(wanted)
        ),
        details={"orphans": sorted(wanted), "source": source, "bytes": dropped_bytes},
    )
