"""Share one computation between the rules that need it, within one judgement.

Several rules derive the same view of a checkpoint (per-expert gaps, fused shard sets, misplaced names, KV-scale
tensors). `once_per` computes it once per object it is called with, held by `model.views` while that object lives.
`once_per_detection` keys a view of a rule context by its detection instead, for views that read no value
statistics: a judgement's value rules see a new context (the scanned checkpoint) with the same detection, and share
such a view with the header rules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from ..model.views import remembered, view

R = TypeVar("R")
C = TypeVar("C")  # a rule context (`rules.base.Context`): anything with a `det`

once_per = view


def once_per_detection(fn: Callable[[C], R]) -> Callable[[C], R]:
    """`once_per` keyed by `ctx.det`. Only for views made of the detection and the checkpoint's header views (tensor
    map, modules, layouts), never of its value statistics: a judgement detects once, and its value rules' checkpoint
    differs from its header rules' by the value statistics alone."""

    @functools.wraps(fn)
    def wrapper(ctx: C) -> R:
        return remembered(ctx.det, fn, lambda: fn(ctx))  # type: ignore[attr-defined]

    return wrapper
