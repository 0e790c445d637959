"""Format name -> renderer. Each renderer takes the report and whether colour is allowed."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import json_format, markdown, sarif, text
from .model import Report

RENDERERS: dict[str, Callable[..., str]] = {
    "text": text.render,
    "json": json_format.render,
    "markdown": markdown.render,
    "sarif": sarif.render,
}


def render(report: Report, fmt: str, *, color: bool = False) -> str:
    return RENDERERS[fmt](report, color=color)


def render_many(reports: Sequence[Report], fmt: str, *, color: bool = False) -> str:
    """Several reports as one document (`ckpt doctor --pre-commit`): SARIF holds one run per report, JSON is an array
    of reports (each one the schema_version 1 object), text and Markdown put the reports one after another."""
    if fmt == "sarif":
        return sarif.render_many(reports)
    if fmt == "json":
        return json_format.render_many(reports)
    return "\n".join(render(r, fmt, color=color) for r in reports)
