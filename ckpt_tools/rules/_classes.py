"""Detection rows grouped into classes, so that a rule judges a class once instead of every row.

A large MoE checkpoint has tens of thousands of rows but a few dozen classes: every expert projection of a layer has
the same layout and the same declared scheme. The rows of one class share the module layout (its tensors' suffixes,
dtypes and shapes; the disk scheme is read from them alone), the declared scheme, the config group (compressed-
tensors) or algo (ModelOpt) and the component; they differ in their names only. A verdict that reads nothing else
holds for every member; a rule lists the members only of the classes it reports, in row order (sorted by name).

A rule whose verdict also reads part of a row's name splits a class by `name_templates`: the name with every digit
as `#`, which is all of the name besides which layer and which expert. It must say why its verdict does not depend
on the digits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import TypeVar

from ..detect.resolve import RowClass
from .base import Context

_DIGITS = str.maketrans("0123456789", "#" * 10)
V = TypeVar("V")


def name_templates(names: list[str]) -> list[str]:
    """Each name with its digits replaced by `#`. WHY as one joined string: one `translate` call for a whole class
    instead of one per member; names holding the separator, which a header may contain, are kept as they are
    (exact, and only finer classes)."""
    joined = "\n".join(names)
    if joined.count("\n") != max(len(names) - 1, 0):
        return names
    return joined.translate(_DIGITS).split("\n") if names else []


def row_classes(ctx: Context) -> tuple[RowClass, ...]:
    """The detection's rows in classes (`Detection.classes`)."""
    return ctx.det.classes


def templates_of(names: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """The members' name templates, and each distinct template with the first member that has it."""
    templates = name_templates(list(names))
    first = dict(zip(reversed(templates), reversed(names), strict=True))  # later items overwrite: the first stays
    return templates, first


def split_by(names: tuple[str, ...], templates: list[str]) -> dict[str, list[str]]:
    """Template -> the members that have it, in row order: for a class whose templates get different verdicts."""
    split: dict[str, list[str]] = {}
    for name, template in zip(names, templates, strict=True):
        split.setdefault(template, []).append(name)
    return split


def in_row_order(found: Iterable[tuple[Iterable[str], V]]) -> Iterator[tuple[str, V]]:
    """(member, value) for every member of every (members, value) given, in row order (by name)."""
    return iter(sorted(((name, value) for names, value in found for name in names), key=itemgetter(0)))
