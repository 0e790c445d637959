from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from ._env import removed, trap
from .base import ServeCheck, ServeContext, register


@register
class UnknownEnvVar(ServeCheck):
    """A VLLM_* environment variable the runtime does not know.

    What it catches
    A VLLM_* environment variable absent from the runtime's vllm/envs.py (the profile's known variables). Removed
    variables and known traps are their own findings.

    Why it matters
    vLLM ignores it and logs 'Unknown vLLM environment variable detected' (an error with
    --fail-on-environ-validation), so whatever it was meant to switch stays as it is.

    Anti-pattern
    Keeping env vars from an older image in a compose file.

    Fix
    Remove it, or use the spelling the runtime's vllm/envs.py defines.

    Source
    vllm/platforms/interface.py validate_environ (0.33.0 wheel)
    """

    code = "CS105"
    slug = "unknown-env-var"
    severity = "warning"
    title = "VLLM_* variable the runtime does not know"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        known = ctx.rt.env.known
        for name, value in ctx.cmd.env.items():
            if removed(ctx, name) is not None or trap(ctx, name, value):
                continue
            if name.startswith("VLLM_") and known and name not in known:
                yield self.finding(
                    f"{name} is not an environment variable of {ctx.rt.name}: vLLM logs 'Unknown "
                    f"vLLM environment variable detected' and ignores it",
                    fix=f"remove {name}",
                    details={"variable": name},
                )
