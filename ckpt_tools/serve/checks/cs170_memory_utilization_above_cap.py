from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from .base import ServeCheck, ServeContext, register


@register
class MemoryUtilizationAboveCap(ServeCheck):
    """--gpu-memory-utilization above the hardware profile's cap.

    What it catches
    A value above the hardware profile's `gpu_memory_utilization_max` (0.88 on GB10's unified memory). Profiles
    without a cap are not judged.

    Why it matters
    The unified LPDDR5X pool is shared by CPU and GPU: above ~0.88 it page-thrashes.

    Anti-pattern
    0.92-0.95 from generic dedicated-GPU docs.

    Fix
    Use the hardware profile's value (0.85 alone, 0.70 next to sidecars), given with the finding.

    Source
    the AEON-7 Qwen3.6-35B-A3B NVFP4 model card (DO NOT UNDO 4)
    """

    code = "CS170"
    slug = "memory-utilization-above-cap"
    severity = "error"
    title = "--gpu-memory-utilization above the hardware cap"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        hw = ctx.hw
        util = ctx.value("--gpu-memory-utilization")
        cap = hw.gpu_memory_utilization_max if hw else None
        if hw is None or util is None or cap is None:
            return
        try:
            above = float(util) > cap
        except ValueError:
            return  # not a number: the flag table's finding
        if above:
            yield self.finding(
                f"--gpu-memory-utilization {util} is above {hw.id}'s cap {cap}: unified memory page-thrashes",
                fix=ctx.planned("--gpu-memory-utilization"),
            )
