"""Share one computation between the rules that need it, within one analysis.

Several rules derive the same view of a checkpoint (per-expert gaps, fused shard sets, misplaced names, KV-scale
tensors). `once_per` remembers the result for the last object it was called with (by identity, through a weak
reference), so the view is computed once per analysis and nothing outlives the checkpoint. `once_per_detection`
keys a view of a rule context by its detection instead, for views that read no value statistics: a judgement's
value rules see a new context (the scanned checkpoint) with the same detection, so such a view can be made while the
scan runs (`Rule.prepare`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
C = TypeVar("C")  # a rule context (`rules.base.Context`): anything with a `det`


def once_per(fn: Callable[[T], R]) -> Callable[[T], R]:
    return _remembering(fn, _itself, 1)


def once_per_detection(fn: Callable[[C], R]) -> Callable[[C], R]:
    """`once_per` keyed by `ctx.det`, remembering the last two detections: a repair judges its planned after-state
    between the two steps of its before-state's judgement (`pipeline.JudgementInProgress`), and each keeps its view.

    Only for views made of the detection and the checkpoint's header views (tensor map, modules, layouts), never of
    its value statistics: WHY one detection stands for them is that a judgement detects once and its value rules'
    checkpoint differs from its header rules' by the value statistics alone (`pipeline._with_views`,
    `repair.predict.with_scanned_values`)."""
    return _remembering(fn, _detection, 2)


def _itself(arg: object) -> object:
    return arg


def _detection(ctx: object) -> object:
    return ctx.det  # type: ignore[attr-defined]


def _remembering(fn: Callable[[T], R], key: Callable[[T], object], size: int) -> Callable[[T], R]:
    """`fn` remembering its results for the last `size` keys (`key(arg)`), by identity through weak references."""
    last: list[tuple[weakref.ref, R]] = []

    @functools.wraps(fn)
    def wrapper(arg: T) -> R:
        held = key(arg)
        for ref, value in last:
            if ref() is held:
                return value
        value = fn(arg)
        last[:] = [(weakref.ref(held), value), *last[: size - 1]]
        return value

    return wrapper
