"""The value statistics read column by column, in C, so that the value rules cost a few C passes over the measured
tensors instead of a Python step per tensor.

A large checkpoint has ~100k measured scale tensors; almost all are clean (no NaN, no zero, no negative value) and
hold a usable global scale or a clean block scale. `unusual` names the few tensors any per-tensor value verdict can
be about; `usable_scalars` gives one-element scales as a float column that rules compare with C-level maps, and
`member_scalars` keeps those columns for the members of the detection's row classes, so that the rules that read
the same global scales (mixed-scale-convention, fused-scale-mismatch) look each up once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain, compress, repeat
from operator import add, attrgetter, is_not, itemgetter

from ..model.modules import join_name
from ..model.values import WIDE_FLOAT_DTYPES, ValueStats
from ._classes import row_classes
from ._memo import once_per
from ._values import usable_scalar
from .base import Context

_NAN, _INF, _ZERO, _NEGATIVE, _ZERO_ROWS = map(attrgetter, ("nan", "inf", "zero", "negative", "zero_rows"))
_VALUES, _DTYPE = attrgetter("values"), attrgetter("dtype")
_FIRST = itemgetter(0)
_POSITIVE = (0.0).__lt__  # 0 < v: False for NaN
_BELOW_INF = math.inf.__gt__  # v < inf: False for NaN


@once_per
def unusual(values: ValueStats) -> tuple[str, ...]:
    """The measured tensors, in the statistics' order, that hold a NaN, an infinity, a zero, a negative value or a
    zero channel by their counts, or a non-finite value among their small-tensor `values`: a superset of every tensor
    nan-fp8-scale, invalid-scale-value and zero-scale-row can report (each reads one of these facts), usually empty.

    WHY the sums are exact screens: the counts are non-negative, so a field's sum is zero exactly when every tensor's
    is; a NaN or infinity among the values makes their float sum NaN or infinite, and finite values sum to a finite
    number unless the sum overflows, in which case every tensor with values is looked at."""
    stats = values.tensors.values()
    flagged: set[str] = set()
    for field in (_NAN, _INF, _ZERO, _NEGATIVE, _ZERO_ROWS):
        if any(map(field, stats)):
            flagged.update(compress(values.tensors, map(field, stats)))
    if not math.isfinite(sum(chain.from_iterable(filter(None, map(_VALUES, stats))))):
        isfinite = math.isfinite
        flagged.update(n for n, s in values.items() if s.values is not None and not all(map(isfinite, s.values)))
    if not flagged:
        return ()
    return tuple(n for n in values.tensors if n in flagged)


def usable_scalars(values: ValueStats, names: Sequence[str]) -> list[float]:
    """Per name, `_values.usable_scalar` of what the scan measured: the value of a one-element F32 / BF16 / F16 tensor
    when it is finite and above zero, else NaN: what fused-scale-mismatch and mixed-scale-convention compare, as a
    column.

    The common cases (every name measured, every value one finite positive wide float; or no name measured) are a
    few C passes; any other column is built element by element with the same test."""
    stats = list(map(values.tensors.get, names))
    # counted by identity, in C (`None in stats` would call the dataclass's `__eq__` once per element)
    measured = sum(map(is_not, stats, repeat(None)))
    if not measured:  # a suffix this checkpoint does not use (the other producer's name)
        return [math.nan] * len(stats)
    if measured == len(stats) and WIDE_FLOAT_DTYPES.issuperset(map(_DTYPE, stats)):
        held = list(map(_VALUES, stats))
        if None not in held and all(map((1).__eq__, map(len, held))):
            column = list(map(_FIRST, held))
            if all(map(_POSITIVE, column)) and all(map(_BELOW_INF, column)):
                return column
    return list(map(usable_scalar, stats))


class MemberScalars:
    """The members of the detection's row classes (`row_classes`) in one flat list, class after class, and per suffix
    the usable value (`usable_scalars`) of each member's `<member>.<suffix>`, looked up class by class on first ask.

    WHY a class whose layout lacks the suffix is never looked up (its members' values stay NaN, as if unread): a
    module's tensors are exactly its layout's suffixes, and the scan measures only tensors of the checkpoint (a
    repair's predicted state carries the statistics under the repaired names and leaves out the dropped tensors'),
    so no member of that class has a measured `<member>.<suffix>`."""

    def __init__(self, ctx: Context) -> None:
        self.values = ctx.ckpt.values
        self.classes = row_classes(ctx)
        self.starts = list(accumulate((len(c.names) for c in self.classes), initial=0))
        self.names: list[str] = list(chain.from_iterable(c.names for c in self.classes))
        layouts = ctx.ckpt.layouts.layouts
        self._suffixes = [frozenset(suffix for suffix, _dtype, _shape in layouts[c.layout]) for c in self.classes]
        self._columns: dict[str, list[float]] = {}
        self._filled: dict[str, set[int]] = {}

    def column(self, suffix: str, classes: Iterable[int]) -> list[float]:
        """The flat column of `suffix` (index: `starts[k] + member`), with at least `classes` (indices into
        `classes`) looked up, in one pass; members of the other classes may still be NaN."""
        column = self._columns.get(suffix)
        if column is None:
            column = self._columns[suffix] = [math.nan] * len(self.names)
            self._filled[suffix] = set()
        filled = self._filled[suffix]
        todo = [k for k in classes if k not in filled]
        filled.update(todo)
        todo = [k for k in todo if suffix in self._suffixes[k]]
        if not todo or self.values is None:
            return column
        tail = f".{suffix}"
        names: list[str] = []
        for k in todo:
            members = self.classes[k].names
            if "" in members:  # a top-level module: its tensors have no prefix
                names.extend(join_name(m, suffix) for m in members)
            else:
                names.extend(map(add, members, repeat(tail)))
        found = usable_scalars(self.values, names)
        at = 0
        for k in todo:
            start, end = self.starts[k], self.starts[k + 1]
            column[start:end] = found[at : at + end - start]
            at += end - start
        return column


@once_per
def member_scalars(ctx: Context) -> MemberScalars:
    """The analysis' `MemberScalars`, shared by the rules that read global scales."""
    return MemberScalars(ctx)
