"""Detection rows grouped into classes, so that a rule judges a class once instead of every row.

A large MoE checkpoint has tens of thousands of rows but a few dozen classes: every expert projection of a layer has
the same layout and the same declared scheme. A class is what the layout rules' verdict on a row can depend on:

- the module's layout id (its tensors' suffixes, dtypes and shapes; the disk scheme is read from them alone);
- the declared scheme, by identity (rows share a few scheme objects, alive as long as the rows);
- the config group (compressed-tensors) or algo (ModelOpt) that quantizes the row;
- the row's name with every digit replaced by `#`: all a rule may read of the name besides its digits (which layer,
  which expert). A rule that keys on a class must be able to say why its verdict does not depend on the digits.

The keys are built column by column in C (one attribute map per column, one string translate for all names); the
rows of a class are listed only for the classes a rule reports (`indices`).
"""

from __future__ import annotations

from collections.abc import Container, Hashable, Iterator
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter

from ..detect.resolve import ModuleRow
from ._memo import once_per
from .base import Context

_DECLARED, _GROUP = attrgetter("declared"), attrgetter("group")
_DIGITS = str.maketrans("0123456789", "#" * 10)

Key = tuple[int, int, str | None, str]  # (layout id, id(declared scheme), group, name with digits as `#`)


@dataclass(frozen=True)
class RowClasses:
    rows: tuple[ModuleRow, ...]
    keys: list[Key]  # per row, in row order
    first: dict[Key, int]  # class key -> index of its first row

    def indices(self, wanted: Container[Hashable]) -> Iterator[int]:
        """Indices of the rows whose class is in `wanted`, in row order."""
        return compress(range(len(self.keys)), map(wanted.__contains__, self.keys))


def name_templates(names: list[str]) -> list[str]:
    """Each name with its digits replaced by `#`, translated as one joined string (names holding the separator,
    which a header may contain, are kept as they are: exact, and only finer classes)."""
    joined = "\n".join(names)
    if joined.count("\n") != max(len(names) - 1, 0):
        return names
    return joined.translate(_DIGITS).split("\n") if names else []


@once_per
def row_classes(ctx: Context) -> RowClasses:
    rows = ctx.det.rows
    names = [r.name for r in rows]
    keys = list(
        zip(
            map(ctx.ckpt.layouts.of.__getitem__, names),
            map(id, map(_DECLARED, rows)),
            map(_GROUP, rows),
            name_templates(names),
            strict=True,
        )
    )
    # Later items overwrite earlier ones, so walking backwards leaves each key with its first row.
    first = dict(zip(reversed(keys), range(len(keys) - 1, -1, -1), strict=True))
    return RowClasses(rows, keys, first)
