"""What CS104-CS106 share: how an environment variable of the command is matched against the runtime's removed
variables and the runtime's and hardware's known traps (rules/runtimes/*.toml, rules/hardware.toml)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import ServeContext


def removed(ctx: ServeContext, name: str) -> Mapping[str, Any] | None:
    """The runtime's entry for a variable it no longer reads."""
    return ctx.rt.env_removed.get(name)


def trap(ctx: ServeContext, name: str, value: str | None) -> Mapping[str, Any] | None:
    """The first trap entry this variable (and value, when the entry names one) matches."""
    traps = list(ctx.rt.env_traps) + list(ctx.hw.env_traps if ctx.hw else ())
    return next((t for t in traps if t["name"] == name and ("value" not in t or t["value"] == value)), None)
