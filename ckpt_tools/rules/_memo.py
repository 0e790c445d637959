"""Share one computation between the rules that need it, within one analysis.

Several rules derive the same view of a checkpoint (per-expert gaps, fused shard sets, misplaced names, KV-scale
tensors). `once_per` remembers the result for the last object it was called with (by identity, through a weak
reference), so the view is computed once per analysis and nothing outlives the checkpoint.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


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
