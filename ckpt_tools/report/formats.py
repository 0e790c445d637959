"""Format name -> renderer. Each renderer takes the report and whether colour is allowed."""

from __future__ import annotations

from typing import Callable

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
