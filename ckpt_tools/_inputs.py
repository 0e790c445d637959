"""Argument checks of the Python API: what the CLI accepts (a path or a Hub id, a command string or an argv list,
one hardware id or several) is accepted; anything else is a `UsageError`, never a TypeError from deep inside."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from .errors import UsageError


def target(value: Any, what: str = "target") -> str:
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        if not text.strip():
            raise UsageError(f"{what} is empty: give a checkpoint folder, a .safetensors file or a Hub repo id")
        return text
    raise UsageError(f"{what} must be a path or a Hub repo id (a str or os.PathLike), not {type(value).__name__}")


def ids(value: Any, what: str) -> tuple[str, ...]:
    """One id or a sequence of ids (`hardware="gb10"` and `hardware=["gb10", "h100"]` both work)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise UsageError(f"{what} must be a profile id or a list of them, not {type(value).__name__}")


def optional_id(value: Any, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise UsageError(f"{what} must be a profile id (str), not {type(value).__name__}")


def command(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise UsageError("command must be a `vllm serve` / `docker run` command: one string or a non-empty argv list")


def positive_int(value: Any, what: str, unit: str = "tokens") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{what} must be a whole number of {unit}, not {value!r}")
    return value


def choice(value: Any, choices: Sequence[str], what: str) -> str:
    if isinstance(value, str) and value.lower() in choices:
        return value.lower()
    raise UsageError(f"unknown {what} {value!r}; choose from {', '.join(choices)}")
