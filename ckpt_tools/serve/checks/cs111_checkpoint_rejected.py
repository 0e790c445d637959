from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from .base import ServeCheck, ServeContext, register


@register
class CheckpointRejected(ServeCheck):
    """The runtime refuses this checkpoint's quantization, whatever the command says.

    What it catches
    The checkpoint's algo or config is refused by the runtime profile (e.g. NVFP4_AWQ before the v0.26.0 image).
    The runtime profiles that do load it are listed with the finding.

    Why it matters
    vLLM refuses to start after the whole download.

    Anti-pattern
    Serving an NVFP4_AWQ export with upstream vLLM.

    Fix
    Pick a runtime profile that loads it (listed with the finding; the fix names the first) or re-export.

    Source
    vllm/transformers_utils/config.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.1);
    vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.3);
    rules/runtimes/*.toml [quantization]
    """

    code = "CS111"
    slug = "checkpoint-rejected"
    severity = "error"
    title = "The runtime does not load this checkpoint's quantization"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        if not ctx.facts.rejection:
            return
        alternatives = ctx.plan.alternatives
        yield self.finding(
            f"{ctx.rt.name} refuses this checkpoint: {ctx.facts.rejection}",
            fix=f"--runtime {alternatives[0]}" if alternatives else None,
            details={"alternatives": ", ".join(alternatives)},
        )
