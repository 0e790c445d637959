"""`ckpt plan` as a function: read a target's headers and config, then plan its memory (plan/)."""

from __future__ import annotations

from .pipeline import analyze
from .plan import MemoryPlan, Settings, plan_for

__all__ = ["MemoryPlan", "Settings", "memory_plan"]


def memory_plan(
    target: str, settings: Settings, *, drafter: str | None = None, revision: str | None = None
) -> MemoryPlan:
    """Plan `target` (a folder, a .safetensors file or a Hub repo) from its headers and config, optionally with a
    drafter, e.g. `memory_plan("./my-model", Settings(hardware="gb10"))`."""
    runtime = settings.runtime
    analysis = analyze(target, runtime=runtime, headers_only=True, revision=revision)
    drafter_analysis = analyze(drafter, runtime=runtime, headers_only=True) if drafter else None
    return plan_for(analysis, settings, drafter_analysis=drafter_analysis, drafter_label=drafter)
