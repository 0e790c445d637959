"""The value statistics read column by column, shared by the value rules.

A large checkpoint has ~100k measured scale tensors; almost all are clean (no NaN, no zero, no negative value) and
hold a usable global scale or a clean block scale. `unusual` names the few tensors any per-tensor value verdict can
be about; `usable_scalars` gives one-element scales as a float column, and
`member_scalars` keeps those columns for the members of the detection's row classes, so that the rules that read
the same global scales (mixed-scale-convention, fused-scale-mismatch) look each up once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain, compress
from operator import attrgetter

from ..model.modules import join_name
from ..model.values import ValueStats
from ._classes import row_classes
from ._memo import once_per, once_per_detection
from ._values import usable_scalar
from .base import Context

_NAN, _INF, _ZERO, _NEGATIVE, _ZERO_ROWS = map(attrgetter, ("nan", "inf", "zero", "negative", "zero_rows"))
_VALUES = attrgetter("values")


@once_per
def unusual(values: ValueStats) -> tuple[str, ...]:
    """The measured tensors, in the statistics' order, that hold a NaN, an infinity, a zero, a negative value or a
    zero channel by their counts, or a non-finite value among their small-tensor `values`: a superset of every tensor
    nan-fp8-scale, invalid-scale-value and zero-scale-row can report (each reads one of these facts), usually empty.

    WHY the sums are exact screens: the counts are non-negative, so a field's sum is zero exactly when every tensor's
    is; a NaN or infinity among the values makes their float sum NaN or infinite, and finite values sum to a finite
    number unless the sum overflows, in which case every tensor with values is looked at. The screens read each
    distinct statistics object once (the scan shares one among equal results: 93k tensors, a few thousand objects),
    which is exact as each tensor's statistics are one of them."""
    stats = values.tensors.values()
    distinct = dict(zip(map(id, stats), stats, strict=True)).values()
    flagged: set[str] = set()
    for field in (_NAN, _INF, _ZERO, _NEGATIVE, _ZERO_ROWS):
        if any(map(field, distinct)):
            flagged.update(compress(values.tensors, map(field, stats)))
    if not math.isfinite(sum(chain.from_iterable(filter(None, map(_VALUES, distinct))))):
        isfinite = math.isfinite
        flagged.update(n for n, s in values.items() if s.values is not None and not all(map(isfinite, s.values)))
    if not flagged:
        return ()
    return tuple(n for n in values.tensors if n in flagged)


def usable_scalars(values: ValueStats, names: Sequence[str]) -> list[float]:
    """Per name, `_values.usable_scalar` of what the scan measured: the value of a one-element F32 / BF16 / F16 tensor
    when it is finite and above zero, else NaN: what fused-scale-mismatch and mixed-scale-convention compare, as a
    column."""
    return [usable_scalar(values.tensors.get(name)) for name in names]


class MemberTable:
    """The members of the detection's row classes (`row_classes`) in one flat list, class after class, and per
    (suffix, class) the names of the members' `<member>.<suffix>` tensors: header facts only, made once per
    detection (`member_table`), so a value rule can make them while the scan runs (`Rule.prepare`)."""

    def __init__(self, ctx: Context) -> None:
        self.classes = row_classes(ctx)
        self.starts = list(accumulate((len(c.names) for c in self.classes), initial=0))
        self.names: list[str] = list(chain.from_iterable(c.names for c in self.classes))
        layouts = ctx.ckpt.layouts.layouts
        self.suffixes = [frozenset(suffix for suffix, _dtype, _shape in layouts[c.layout]) for c in self.classes]
        self._tensors: dict[tuple[str, int], list[str]] = {}

    def tensor_names(self, suffix: str, k: int) -> list[str]:
        """The names `<member>.<suffix>` of class `k`'s members, in member order (made once)."""
        names = self._tensors.get((suffix, k))
        if names is None:
            members = self.classes[k].names
            names = self._tensors[(suffix, k)] = [join_name(m, suffix) for m in members]
        return names


@once_per_detection
def member_table(ctx: Context) -> MemberTable:
    """The judgement's `MemberTable`, shared by the rules that read global scales, before and after the scan."""
    return MemberTable(ctx)


class MemberScalars:
    """Per suffix, the usable value (`usable_scalars`) of each `MemberTable` member's `<member>.<suffix>`, in the
    table's flat order, looked up class by class on first ask.

    WHY a class whose layout lacks the suffix is never looked up (its members' values stay NaN, as if unread): a
    module's tensors are exactly its layout's suffixes, and the scan measures only tensors of the checkpoint (a
    repair's predicted state carries the statistics under the repaired names and leaves out the dropped tensors'),
    so no member of that class has a measured `<member>.<suffix>`."""

    def __init__(self, ctx: Context) -> None:
        self.values = ctx.ckpt.values
        table = member_table(ctx)
        self.table = table
        self.classes, self.starts, self.names = table.classes, table.starts, table.names
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
        todo = [k for k in todo if suffix in self.table.suffixes[k]]
        if not todo or self.values is None:
            return column
        names = list(chain.from_iterable(self.table.tensor_names(suffix, k) for k in todo))
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
