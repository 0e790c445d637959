from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from ._env import removed, trap
from .base import ServeCheck, ServeContext, register


@register
class EnvTrap(ServeCheck):
    """An environment variable that breaks or slows this runtime or hardware.

    What it catches
    Variables the manuals list as traps (rules/runtimes/*.toml and rules/hardware.toml `env_trap` entries, each
    with its own message, fix, source and, where it differs, severity): forcing Marlin on GB10,
    VLLM_ENABLE_STARTUP_PLAN=1 on unified memory, a stale V1-runner pin. A variable the runtime removed is the
    removed-env-var finding instead.

    Why it matters
    Measured regressions or a crash at engine init (each entry cites its source).

    Anti-pattern
    -e VLLM_TEST_FORCE_FP8_MARLIN=1 from 2024 Blackwell forum advice.

    Fix
    Remove the variable (the entry's fix is given with the finding).

    Source
    the AEON-7 Qwen3.6-35B-A3B NVFP4 model card (DO NOT UNDO 1); the AEON vLLM-Ultimate DGX Spark image README
    """

    code = "CS106"
    slug = "env-trap"
    severity = "warning"
    title = "Environment variable that breaks or slows this runtime or hardware"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        for name, value in ctx.cmd.env.items():
            if removed(ctx, name) is not None:
                continue
            hit = trap(ctx, name, value)
            if hit:
                yield self.finding(
                    f"{name}={value}: {hit.message} ({hit.source})",
                    fix=hit.fix,
                    severity=hit.severity,
                    details={"variable": name},
                )
