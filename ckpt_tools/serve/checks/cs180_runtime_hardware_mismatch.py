from __future__ import annotations

from collections.abc import Iterable

from ...knowledge.runtimes import default_runtime_id
from ...rules.base import Finding
from .base import ServeCheck, ServeContext, register


@register
class RuntimeHardwareMismatch(ServeCheck):
    """A runtime image built for other GPUs than the hardware profile's.

    What it catches
    A runtime profile used on hardware it was not built for: the profile's `hardware` list (rules/runtimes/*.toml
    [serve]) does not name the hardware profile. The AEON images are sm_121a/sm_120 builds.

    Why it matters
    The image will not run as-is on Hopper, Ampere or B200: its CUDA kernels are compiled for the listed GPUs
    alone, so vLLM stops at the first kernel launch ('no kernel image is available for execution on the device').

    Anti-pattern
    Pulling the DGX Spark image onto an H100 host.

    Fix
    Use the upstream vLLM image for that GPU (--runtime vllm-0.33).

    Source
    the AEON-7 Qwen3.6-35B-A3B NVFP4 model card (Hardware scope)
    """

    code = "CS180"
    slug = "runtime-hardware-mismatch"
    severity = "error"
    title = "Runtime image built for other hardware"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        mismatch = ctx.rt.hardware_mismatch(ctx.hw)
        if mismatch:
            yield self.finding(mismatch, fix=f"--runtime {default_runtime_id()}")
