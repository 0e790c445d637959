from __future__ import annotations

import shlex
from collections.abc import Iterable

from ...rules.base import Finding
from ._vision import mm_limits
from .base import ServeCheck, ServeContext, register


@register
class MmLimitWithoutVision(ServeCheck):
    """Image or video limits on a checkpoint whose vision tower vLLM does not load.

    What it catches
    Non-zero --limit-mm-per-prompt image/video limits on a checkpoint with no vision tower, or whose tower sits
    under a prefix vLLM does not load (misnested-prefix).

    Why it matters
    Image requests fail or return garbage ('!!!!') because the tower is missing or never loaded.

    Anti-pattern
    Keeping --limit-mm-per-prompt after exporting only the language model.

    Fix
    Drop the flag, or fix the tower first (`ckpt fix-prefix`, given with the finding).

    Source
    vllm/model_executor/models/qwen3_5.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §5.1);
    vllm/config/multimodal.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §7.4); the AEON-7 Qwen3.6-35B-A3B NVFP4
    model card (Vision fix)
    """

    code = "CS121"
    slug = "mm-limit-without-vision"
    severity = "error"
    title = "--limit-mm-per-prompt without a loadable vision tower"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        facts = ctx.facts
        mm = mm_limits(ctx)
        if not mm.usable or mm.limits is None or not mm.nonzero or facts.vision_loadable:
            return
        why = (
            "its vision tower sits under a prefix vLLM does not load (misnested-prefix)"
            if facts.has_vision
            else "the checkpoint has no vision tower"
        )
        fix = "ckpt fix-prefix " + shlex.quote(facts.target) if facts.has_vision else "remove --limit-mm-per-prompt"
        yield self.finding(f"--limit-mm-per-prompt asks for images/video but {why}", fix=fix)
