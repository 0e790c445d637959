from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from ._env import removed
from .base import ServeCheck, ServeContext, register


@register
class RemovedEnvVar(ServeCheck):
    """An environment variable the runtime no longer reads.

    What it catches
    VLLM_NVFP4_GEMM_BACKEND, VLLM_TEST_FORCE_FP8_MARLIN, VLLM_USE_FLASHINFER_MOE_*, ... on a runtime that no longer
    reads them (the runtime profile's removed variables, each with its replacement).

    Why it matters
    The variable does nothing: the backend you meant to pick is not picked, and the runtime warns about an unknown
    variable.

    Anti-pattern
    -e VLLM_NVFP4_GEMM_BACKEND=cutlass on vLLM >= 0.24.

    Fix
    Use the flag that replaced it (--linear-backend / --moe-backend), or drop it.

    Source
    vllm/config/kernel.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.3); the AEON vLLM-Ultimate DGX Spark image
    README (2026-07-02 note)
    """

    code = "CS104"
    slug = "removed-env-var"
    severity = "error"
    title = "Environment variable the runtime removed"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        for name in ctx.cmd.env:
            entry = removed(ctx, name)
            if entry is not None:
                yield self.finding(
                    f"{name} was removed: {ctx.rt.name} ignores it ({entry.source})",
                    fix=f"remove {name}; use {entry.replacement}",
                    details={"variable": name},
                )
