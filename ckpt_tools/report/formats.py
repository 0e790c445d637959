"""Format name -> renderer. Each renderer takes the report and whether colour is allowed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import json_format, markdown, sarif, text
from .model import Report, Unreadable

RENDERERS: dict[str, Callable[..., str]] = {
    "text": text.render,
    "json": json_format.render,
    "markdown": markdown.render,
    "sarif": sarif.render,
}


def render(report: Report, fmt: str, *, color: bool = False) -> str:
    return RENDERERS[fmt](report, color=color)


def render_many(reports: Sequence[Report | Unreadable], fmt: str, *, color: bool = False) -> str:
    """Several reports as one document (`ckpt doctor A B`, `--pre-commit`): SARIF holds one run per report, JSON is an
    array of reports (each one the schema_version 1 object, or an entry with an `error` for a target that could not
    be read), text and Markdown put the reports one after another."""
    if fmt == "sarif":
        return sarif.render_many(reports)
    if fmt == "json":
        return json_format.render_many(reports)
    return "\n".join(_unreadable(r, fmt) if isinstance(r, Unreadable) else render(r, fmt, color=color) for r in reports)


def _unreadable(entry: Unreadable, fmt: str) -> str:
    if fmt == "markdown":
        return f"## ckpt {entry.command}: `{entry.target}`\n\n**could not be read**: {entry.error}\n"
    return f"ckpt {entry.command} {entry.target}\n  could not be read: {entry.error}\n"
