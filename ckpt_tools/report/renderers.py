"""The one list of output formats: format name -> the module under report/ that renders it.

Every renderer module has `render(report, *, color=False) -> str` and `render_many(reports, *, color=False) -> str`
(several reports as one document, `ckpt doctor --pre-commit`). The CLI's `--format` choice is derived from this list,
so adding a format is its module plus one line here. The modules are imported on first use: the CLI reads the names at
start-up without importing every renderer.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Report, Unreadable

OUTPUT_FORMATS: dict[str, str] = {
    "text": "text",
    "json": "json_format",
    "markdown": "markdown",
    "sarif": "sarif",
}


def renderer(fmt: str) -> ModuleType:
    """The module rendering `fmt` (a name from OUTPUT_FORMATS)."""
    return import_module(f".{OUTPUT_FORMATS[fmt]}", __package__)


def render(report: Report, fmt: str, *, color: bool = False) -> str:
    return renderer(fmt).render(report, color=color)


def render_many(reports: Sequence[Report | Unreadable], fmt: str, *, color: bool = False) -> str:
    """Several reports as one document (`ckpt doctor A B`, `--pre-commit`): SARIF holds one run per report, JSON is an
    array of reports (each one the schema_version 1 object, or an entry with an `error` for a target that could not
    be read), text and Markdown put the reports one after another."""
    return renderer(fmt).render_many(reports, color=color)
