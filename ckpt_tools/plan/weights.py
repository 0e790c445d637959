"""Weight bytes from the headers: exact totals per component, and one rank's share under tensor parallelism."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..detect.resolve import component_lookup
from ..knowledge.architectures import Family
from ..model.checkpoint import Checkpoint
from ..model.tensors import TensorInfo
from . import facts


@dataclass(frozen=True)
class Weights:
    bytes: int  # every tensor's data bytes: exact
    per_device_bytes: int  # one rank's share: replicated tensors in full, split ones divided (rounded up)
    by_component: Mapping[str, int]
    replicated_bytes: int
    split_bytes: int


def weights(tensors: Iterable[TensorInfo], family: Family, tp: int) -> Weights:
    """Exact weight bytes of `tensors`, per component (`component_lookup`) and per rank under `tp`-way tensor
    parallelism."""
    by_component: dict[str, int] = {}
    total = split = 0
    component = component_lookup(family)
    for t in tensors:
        size = t.nbytes
        c = component(t.name)
        by_component[c] = by_component.get(c, 0) + size
        total += size
        if tp > 1 and facts.split_across_ranks(t.name, len(t.shape)):  # which tensors tensor parallelism splits
            split += size
    replicated = total - split
    per_device = replicated + -(-split // tp)
    return Weights(
        bytes=total,
        per_device_bytes=per_device,
        by_component=dict(sorted(by_component.items())),
        replicated_bytes=replicated,
        split_bytes=split,
    )


def checkpoint_weights(ckpt: Checkpoint, family: Family, tp: int) -> Weights:
    """`weights` of a checkpoint's tensors."""
    return weights(ckpt.tensors.values(), family, tp)


def combine(a: Weights, b: Weights, component: str) -> Weights:
    """`a` with `b` (a drafter) added under one component name."""
    comps = dict(a.by_component)
    comps[component] = comps.get(component, 0) + b.bytes
    return Weights(
        bytes=a.bytes + b.bytes,
        per_device_bytes=a.per_device_bytes + b.per_device_bytes,
        by_component=comps,
        replicated_bytes=a.replicated_bytes + b.replicated_bytes,
        split_bytes=a.split_bytes + b.split_bytes,
    )
