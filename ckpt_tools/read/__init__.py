"""Readers: turn a target into a `Source`, and a source into a `Checkpoint`. Readers never judge."""

from __future__ import annotations

from .local import LocalSource
from .source import Source


def open_source(target: str, revision: str | None = None) -> Source:
    """The source for a target as the user typed it."""
    return LocalSource(target)


__all__ = ["LocalSource", "Source", "open_source"]
