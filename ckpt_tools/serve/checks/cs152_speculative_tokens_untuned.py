from __future__ import annotations

from collections.abc import Iterable

from ...knowledge.serving import serving
from ...rules.base import Finding
from ._speculative import canonical_method, speculative_dict
from .base import ServeCheck, ServeContext, register


@register
class SpeculativeTokensUntuned(ServeCheck):
    """num_speculative_tokens away from the measured optimum of a known drafter pairing.

    What it catches
    A num_speculative_tokens that differs from the measured optimum of a known pairing of this architecture and
    speculative method (rules/serving.toml [[pairing]]). MTP on a checkpoint without mtp.* layers is not judged
    here: its drafter is missing, whatever the count (speculative-config-invalid).

    Why it matters
    Acceptance and long-context fidelity fall as n climbs past the optimum; extra draft tokens waste compute.

    Anti-pattern
    num_speculative_tokens 15 on Qwen3.6-35B-A3B with its DFlash drafter.

    Fix
    Use the tuned value (the reference plan's config is given with the finding).

    Source
    the AEON-7 Qwen3.6-35B-A3B NVFP4 model card (DO NOT UNDO 7); rules/serving.toml [[pairing]]
    """

    code = "CS152"
    slug = "speculative-tokens-untuned"
    severity = "warning"
    title = "num_speculative_tokens away from the tuned value"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        spec = speculative_dict(ctx)
        if spec is None:
            return
        canonical = canonical_method(ctx, spec)
        if canonical == "mtp" and not ctx.facts.has_mtp:
            return  # no drafter layers at all: speculative-config-invalid's finding, not a tuning matter
        pair = serving().pairing(ctx.facts.architecture, canonical) if canonical else None
        n = spec.get("num_speculative_tokens")
        if pair and isinstance(n, int) and n != pair.num_speculative_tokens:
            yield self.finding(
                f"num_speculative_tokens {n}; the measured optimum for "
                f"{pair.drafter} is {pair.num_speculative_tokens} ({pair.source})",
                fix=ctx.planned("--speculative-config"),
            )
