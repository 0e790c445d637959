from __future__ import annotations

import orjson

from .model import Report


def render(report: Report, *, color: bool = False) -> str:
    return orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"
