"""Readers: turn a target into a `Source`, and a source into a `Checkpoint`. Readers never judge."""

from __future__ import annotations

from ..errors import UsageError
from .hub_target import HF_SCHEME, parse_hub_target
from .local import LocalSource
from .source import Source


def open_source(target: str, revision: str | None = None) -> Source:
    """The source for a target as the user typed it: a local path (which always wins), or a Hub repo
    (`org/name`, `org/name@revision`, `hf://org/name`) read over HTTP ranges."""
    hub = parse_hub_target(target, revision)
    if hub is None:
        if revision:
            raise UsageError(f"{target}: --revision applies to Hub repos only, and this is a local path")
        return LocalSource(target)
    from .hub import HubSource  # huggingface_hub is imported only for Hub targets

    return HubSource(hub, bare_target=not target.startswith(HF_SCHEME))


__all__ = ["LocalSource", "Source", "open_source"]
