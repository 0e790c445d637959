from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from ._backends import forced_backends
from .base import ServeCheck, ServeContext, register


@register
class ForcedMarlin(ServeCheck):
    """Marlin forced on a W4A4 checkpoint served on a GPU with FP4 tensor cores.

    What it catches
    --moe-backend marlin / --linear-backend marlin on a W4A4 NVFP4 checkpoint served on a hardware profile with
    native FP4 (`native_fp4` in rules/hardware.toml).

    Why it matters
    Auto-selection picks the native CUTLASS path, which is faster for large-expert MoE on GB10; Marlin is a
    weight-only kernel and leaves the FP4 tensor cores idle.

    Anti-pattern
    Forcing Marlin from 2024 Blackwell forum advice.

    Fix
    Drop the flag and let vLLM pick the native FP4 kernels.

    Source
    the AEON-7 Qwen3.6-35B-A3B NVFP4 model card (DO NOT UNDO 1); vllm/model_executor/kernels/linear/__init__.py,
    vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.1)
    """

    code = "CS141"
    slug = "forced-marlin"
    severity = "warning"
    title = "Marlin forced on native-FP4 hardware"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        facts, hw = ctx.facts, ctx.hw
        if facts.activation_mode != "W4A4" or facts.weight_only_nvfp4 or hw is None or not hw.native_fp4:
            return
        linear, moe = forced_backends(ctx)
        for name, value in (("--linear-backend", linear), ("--moe-backend", moe)):
            if value == "marlin":
                yield self.finding(
                    f"{name} marlin on a W4A4 checkpoint on {hw.id}: auto-selection "
                    f"picks the native FP4 path, faster here",
                    fix=f"remove {name}",
                )
