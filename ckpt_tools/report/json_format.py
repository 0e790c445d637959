from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from .model import Report, Unreadable


def render(report: Report, *, color: bool = False) -> str:
    return _dump(report.to_dict())


def render_many(reports: Sequence[Report | Unreadable], *, color: bool = False) -> str:
    """An array of reports, each the schema_version 1 object (`ckpt doctor A B --format json`), or an entry with an
    `error` for a target that could not be read."""
    return _dump([r.to_dict() for r in reports])


def _dump(data: object) -> str:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n"
