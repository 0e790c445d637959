from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from ._vision import mm_limits
from .base import ServeCheck, ServeContext, register


@register
class VisionDisabled(ServeCheck):
    """A command that switches off a vision tower the checkpoint loads.

    What it catches
    --language-model-only, or image/video limits that are all zero, on a checkpoint whose vision tower loads.

    Why it matters
    Image and video input is refused although the checkpoint supports it.

    Anti-pattern
    Stripping vision because an old export's tower was broken.

    Fix
    Use the family's tuned limits (given with the finding), or remove the flag.

    Source
    the AEON-7 Qwen3.6-35B-A3B NVFP4 model card (DO NOT UNDO 8)
    """

    code = "CS122"
    slug = "vision-disabled"
    severity = "warning"
    title = "A working vision tower switched off"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        mm = mm_limits(ctx)
        if not mm.usable or not ctx.facts.vision_loadable:
            return
        off = ctx.cmd.last("--language-model-only")
        if (off is not None and not off.negated) or (mm.limits is not None and not mm.nonzero):
            yield self.finding(
                "the checkpoint's vision tower loads, but this command switches image/video input off",
                fix=ctx.planned("--limit-mm-per-prompt") or "remove the flag",
            )
