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
    last: list[tuple[weakref.ref, R]] = []

    @functools.wraps(fn)
    def wrapper(arg: T) -> R:
        if last and last[0][0]() is arg:
            return last[0][1]
        value = fn(arg)
        last[:] = [(weakref.ref(arg), value)]
        return value

    return wrapper


def once_per_detection(fn: Callable[[C], R]) -> Callable[[C], R]:
    """`once_per` keyed by `ctx.det`, remembering the last two detections: a repair judges its planned after-state
    between the two steps of its before-state's judgement (`pipeline.Judging`), and each keeps its view.

    Only for views made of the detection and the checkpoint's header views (tensor map, modules, layouts), never of
    its value statistics: WHY one detection stands for them is that a judgement detects once and its value rules'
    checkpoint differs from its header rules' by the value statistics alone (`pipeline._with_views`,
    `repair.predict.with_scanned_values`)."""
    last: list[tuple[weakref.ref, R]] = []

    @functools.wraps(fn)
    def wrapper(ctx: C) -> R:
        det = ctx.det  # type: ignore[attr-defined]
        for ref, value in last:
            if ref() is det:
                return value
        value = fn(ctx)
        last[:] = [(weakref.ref(det), value), *last[:1]]
        return value

    return wrapper
