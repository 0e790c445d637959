"""What CS104-CS106 share: how an environment variable of the command is matched against the runtime's removed
variables and the runtime's and hardware's known traps (rules/runtimes/*.toml, rules/hardware.toml)."""

from __future__ import annotations

from ...knowledge.hardware import EnvTrap
from ...knowledge.runtimes import RemovedEnv
from .base import ServeContext


def removed(ctx: ServeContext, name: str) -> RemovedEnv | None:
    """The runtime's entry for a variable it no longer reads."""
    return ctx.rt.env.removed.get(name)


def trap(ctx: ServeContext, name: str, value: str | None) -> EnvTrap | None:
    """The first trap entry this variable (and value, when the entry names one) matches."""
    traps = list(ctx.rt.env.traps) + list(ctx.hw.env_traps if ctx.hw else ())
    return next((t for t in traps if t.name == name and (t.value is None or t.value == value)), None)
