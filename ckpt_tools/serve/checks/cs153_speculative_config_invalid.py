from __future__ import annotations

from collections.abc import Iterable

from ...knowledge.serving import serving
from ...rules.base import Finding
from ._speculative import canonical_method, speculative_config
from .base import ServeCheck, ServeContext, register


@register
class SpeculativeConfigInvalid(ServeCheck):
    """A --speculative-config the runtime rejects or misreads.

    What it catches
    A config that is not a JSON object, a method the runtime does not know, no method for a mounted drafter path
    vLLM cannot auto-detect (the path names no dflash / dspark / eagle), MTP (or a model-specific MTP name) on a
    checkpoint without mtp.* layers to draft with, or no num_speculative_tokens (except for ngram and suffix
    decoding).

    Why it matters
    vLLM rejects the config, or falls back to draft_model and loads the drafter as a plain model.

    Anti-pattern
    --speculative-config '{"model":"/drafter"}' with a DFlash drafter mounted at /drafter.

    Fix
    Give method and num_speculative_tokens explicitly (the reference plan's config is given with the finding).

    Source
    vllm/config/speculative.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §7.2); vllm/config/speculative.py (0.33.0
    wheel, method auto-detection from the drafter path)
    """

    code = "CS153"
    slug = "speculative-config-invalid"
    severity = "error"
    title = "Speculative config the runtime cannot use"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        given, spec = speculative_config(ctx)
        if not given:
            return
        fix = ctx.planned("--speculative-config")
        if not isinstance(spec, dict):
            yield self.finding("--speculative-config must be a JSON object", fix=fix)
            return
        method = spec.get("method")
        model = str(spec.get("model") or "")
        if method is None and model and not any(k in model.lower() for k in serving().speculative.auto_detected_words):
            yield self.finding(
                f"no method: vLLM cannot tell the method from the path {model!r} and loads it as a plain draft model",
                fix=fix,
            )
        elif method is not None and method not in ctx.rt.choices("speculative_method"):
            yield self.finding(f"speculative method {method!r} is not known to {ctx.rt.name}", fix=fix)
        if canonical_method(ctx, spec) == "mtp" and not ctx.facts.has_mtp:
            yield self.finding(
                f"speculative method {method!r} drafts with the checkpoint's own mtp.* layers, and this checkpoint "
                f"has none (no mtp.* tensor): the drafter has no weights. Serve a checkpoint exported with its MTP "
                f"layers, or use a separate drafter (a method with a `model`)",
                fix="remove --speculative-config",
            )
        if "num_speculative_tokens" not in spec and method not in ("ngram", "suffix"):
            yield self.finding("no num_speculative_tokens in --speculative-config", fix=fix)
