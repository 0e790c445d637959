from __future__ import annotations

from collections.abc import Iterable

from ...knowledge.serving import serving
from ...rules.base import Finding
from ._speculative import dflash_config
from .base import ServeCheck, ServeContext, flag_text, register


@register
class DflashAttentionBackend(ServeCheck):
    """An attention backend the runtime's DFlash recipe does not use.

    What it catches
    An attention_backend inside the DFlash speculative config where the runtime needs the drafter's default, a
    missing one where the runtime needs it set (a non-auto --kv-cache-dtype the drafter does not inherit), or a
    body --attention-backend other than the runtime's DFlash backend (a warning). The backends come from the
    runtime profile ([speculative.dflash]) and the model family (rules/serving.toml).

    Why it matters
    DFlash's KV-sharing path is only tested with the recipe's backend; other choices break or slow the drafter.

    Anti-pattern
    Adding attention_backend to the speculative config on the v0.23.0 image.

    Fix
    Use the runtime's DFlash backends (given with the finding).

    Source
    the AEON-7 Qwen3.6-35B-A3B NVFP4 model card (DO NOT UNDO 6, 9); the AEON vLLM-Ultimate DGX Spark image README
    (Quickstart 'Why these flags')
    """

    code = "CS151"
    slug = "dflash-attention-backend"
    severity = "error"
    title = "Attention backend the DFlash recipe of this runtime does not use"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        found = dflash_config(ctx)
        if found is None:
            return
        spec, rules = found
        kv = ctx.value("--kv-cache-dtype")
        fam = serving().family(ctx.facts.architecture, ctx.facts.model_type)
        want_drafter = (fam.dflash_drafter_attention_backend if fam else None) or rules.drafter_attention_backend
        have = spec.get("attention_backend")
        have = str(have).upper() if have is not None else None
        if want_drafter == "forbidden" and have is not None:
            yield self.finding(
                f"attention_backend {have} inside the DFlash speculative config: on "
                f"{ctx.rt.name} the drafter needs its default backend",
                fix=ctx.planned("--speculative-config"),
            )
        elif want_drafter and want_drafter != "forbidden" and have != want_drafter and kv not in (None, "auto"):
            yield self.finding(
                f"the DFlash drafter does not inherit the body's backend: set "
                f'"attention_backend":"{want_drafter}" in --speculative-config with --kv-cache-dtype {kv}',
                fix=ctx.planned("--speculative-config"),
            )
        body = ctx.value("--attention-backend")
        target = rules.target_attention_backend
        if body is not None and target and body.upper() not in (target, "AUTO"):
            yield self.finding(
                f"--attention-backend {body}: DFlash on {ctx.rt.name} is validated with {target} on the body",
                fix=flag_text("--attention-backend", target),
                severity="warning",
            )
