"""Derived views, each computed once per object it is derived from and held here, outside that object.

A `Checkpoint` is frozen with slots, so nothing can write into it; its tensor map, modules and layouts are views
(`view`), and so are the facts several rules share within one judgement (`rules._memo`). A view is remembered while
its object lives and dropped when the object is freed; a copy made with `dataclasses.replace` is another object and
computes its own.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from functools import wraps
from typing import Any, TypeVar

V = TypeVar("V")
_held: dict[int, dict[Hashable, Any]] = {}  # id of a live object -> what was derived from it -> the value


def remembered(owner: object, what: Hashable, compute: Callable[[], V]) -> V:
    """`compute()`, remembered as `what` of `owner` (any object that takes weak references) until `owner` is freed.
    Two threads asking at once may both compute it; both then get the value stored first, so a view is always the
    same object."""
    key = id(owner)
    mine = _held.get(key)
    if mine is None:
        fresh: dict[Hashable, Any] = {}
        mine = _held.setdefault(key, fresh)
        if mine is fresh:
            weakref.finalize(owner, _held.pop, key, None)
    try:
        return mine[what]
    except KeyError:
        return mine.setdefault(what, compute())


def view(compute: Callable[[Any], V]) -> Callable[[Any], V]:
    """`compute(obj)`, remembered per object (`remembered`)."""

    @wraps(compute)
    def get(obj: Any) -> V:
        return remembered(obj, compute, lambda: compute(obj))

    return get


def carry(before: object, after: object, views: tuple[Callable[[Any], Any], ...]) -> None:
    """Hand `after` the `views` that `before` has computed: for a copy whose every difference from `before` lies in
    fields those views do not read (the caller's to know), so each view of `after` is the one of `before`."""
    held = _held.get(id(before))
    if not held:
        return
    mine = _held.get(id(after))
    if mine is None:
        mine = _held[id(after)] = {}
        weakref.finalize(after, _held.pop, id(after), None)
    for get in views:
        compute = get.__wrapped__  # type: ignore[attr-defined]  # `view` wraps the function it remembers
        if compute in held:
            mine.setdefault(compute, held[compute])
