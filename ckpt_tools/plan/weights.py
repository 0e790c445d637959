"""Weight bytes from the headers: exact totals per component, and one rank's share under tensor parallelism."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import compress, islice
from operator import itemgetter, sub

from ..detect.resolve import component_batches
from ..knowledge.architectures import Family
from ..model.checkpoint import Checkpoint
from ..model.tensors import TensorInfo
from . import facts

_NAME, _SHAPE, _BEGIN, _END = itemgetter(0), itemgetter(2), itemgetter(4), itemgetter(5)  # TensorInfo fields


@dataclass(frozen=True)
class Weights:
    bytes: int  # every tensor's data bytes: exact
    per_device_bytes: int  # one rank's share: replicated tensors in full, split ones divided (rounded up)
    by_component: Mapping[str, int]
    replicated_bytes: int
    split_bytes: int


BATCH = 4096  # tensors per whole-list step: the per-name lists of one step stay about a MB on any checkpoint


def weights(tensors: Iterable[TensorInfo], family: Family, tp: int) -> Weights:
    """Exact weight bytes of `tensors`, per component (`component_lookup`, answered per module prefix by
    `component_batches`) and per rank under `tp`-way tensor parallelism, in whole-list steps over batches of
    tensors rather than a Python step per tensor."""
    by_component: dict[str, int] = {}
    total = split = 0
    components_of = component_batches(family)
    it = iter(tensors)
    while batch := list(islice(it, BATCH)):
        names = list(map(_NAME, batch))
        sizes = list(map(sub, map(_END, batch), map(_BEGIN, batch)))  # TensorInfo.nbytes
        components = components_of(names)
        for c in dict.fromkeys(components):
            by_component[c] = by_component.get(c, 0) + sum(compress(sizes, map(c.__eq__, components)))
        total += sum(sizes)
        if tp > 1:  # which tensors tensor parallelism splits: a name pattern per tensor
            ndims = map(len, map(_SHAPE, batch))
            split += sum(compress(sizes, map(facts.split_across_ranks, names, ndims)))
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
    """`weights` of a checkpoint's tensors, made once per checkpoint, family and `tp`: serve-flags plans the same
    checkpoint twice (fitting its own command, then checking it as check-serve does). Kept in the checkpoint's
    `__dict__`, as its cached views are: a frozen `Checkpoint` never changes its tensors, and `replace` makes a new
    one without the memo. The family object is kept with the answer and compared by identity (so an id is never
    mistaken for another's)."""
    memo = ckpt.__dict__.setdefault("_plan_weights", {})
    key = (id(family), tp)
    hit = memo.get(key)
    if hit is None or hit[0] is not family:
        hit = memo[key] = (family, weights(ckpt.tensors.values(), family, tp))
    return hit[1]


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
