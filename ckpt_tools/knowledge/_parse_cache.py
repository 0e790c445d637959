"""Parsed rules/ files, kept between runs: tomllib is pure Python, and parsing the knowledge files cost every command
30-40 ms (a few percent of a header-only doctor on a 190k-tensor checkpoint) although they change only with a release.

Each file's parse is stored with the text it came from, as JSON (data only: no module of ckpt loads pickle or marshal
data), in the user's cache folder (`$XDG_CACHE_HOME/ckpt-tools/knowledge`, default
`~/.cache/ckpt-tools/knowledge`; `CKPT_NO_CACHE=1` turns it off). A stored parse is used only when its text is the
file's text as read now, so an edited rules file is parsed afresh; one per interpreter version (its TOML parser is
the interpreter's). The cache is best effort: an unwritable or damaged cache costs the parse, never an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any


def cache_folder() -> Path | None:
    if os.environ.get("CKPT_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ckpt-tools" / "knowledge"


def _entry(folder: Path, name: str) -> Path:
    return folder / f"{name.replace('/', '_')}.{sys.implementation.cache_tag}.json"


def load(name: str, text: str) -> dict[str, Any] | None:
    """The stored parse of `text` (the rules file `name`), or None when there is none for this very text."""
    folder = cache_folder()
    if folder is None:
        return None
    try:
        stored = json.loads(_entry(folder, name).read_bytes())
        stored_text, data = stored["text"], stored["data"]
    except (OSError, ValueError, TypeError, KeyError):  # absent, unreadable, damaged, another shape
        return None
    return data if stored_text == text and isinstance(data, dict) else None


def store(name: str, text: str, data: dict[str, Any]) -> None:
    """Keep `data`, the parse of `text`, for the next run: written whole or not at all (a temporary file renamed over
    the entry), so a concurrent run reads the old entry or the new one."""
    folder = cache_folder()
    if folder is None:
        return
    try:
        blob = json.dumps({"text": text, "data": data}).encode()
    except (TypeError, ValueError):  # a value JSON cannot keep (a TOML date): parsed every time
        return
    entry = _entry(folder, name)
    temporary = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(blob)
        os.replace(temporary, entry)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
