from __future__ import annotations

from collections.abc import Iterable

from ...detect.quant_formats import format_for
from ...rules.base import Finding
from .base import ServeCheck, ServeContext, register


@register
class QuantizationMismatch(ServeCheck):
    """--quantization disagrees with the method vLLM resolves for the checkpoint.

    What it catches
    A --quantization value vLLM rejects for this checkpoint (modelopt on compressed-tensors, any value on an
    unquantized checkpoint), or one it silently overrides (the ModelOpt and AutoRound overrides: a warning, since
    the flag then misstates what runs). Values the format's own override accepts (rules/formats.toml
    `override_from`) pass. Not judged when the runtime refuses the checkpoint (unsupported-quant-algo).

    Why it matters
    'Quantization method specified in the model config (X) does not match the quantization method specified in the
    `quantization` argument (Y)'; or a flag that lies about what runs.

    Anti-pattern
    --quantization modelopt copied from a ModelOpt sibling onto a compressed-tensors checkpoint.

    Fix
    Use the method ckpt resolves for the checkpoint (given with the finding), or omit the flag.

    Source
    vllm/config/model.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.5)
    """

    code = "CS110"
    slug = "quantization-mismatch"
    severity = "error"
    title = "--quantization disagrees with the checkpoint"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        facts = ctx.facts
        user = ctx.value("--quantization")
        if user is None or facts.rejection:
            return
        resolved = facts.vllm_quantization
        planned = ctx.planned("--quantization") or "(omit --quantization)"
        if resolved is None:
            yield self.finding(
                f"--quantization {user} on a checkpoint that is not quantized: vLLM quantizes nothing from it or fails",
                fix="remove --quantization",
            )
            return
        if user == resolved:
            return
        fmt = format_for(facts.producer)
        if fmt is not None and user in fmt.override_from:
            return  # the config class's override accepts it and resolves `resolved` (rules/formats.toml)
        if fmt is not None and fmt.id == "auto-round":
            # INCConfig.override_quantization_method ignores the user's value: it becomes inc without an error.
            yield self.finding(
                f"--quantization {user}: vLLM silently replaces it with {resolved} for "
                f"this AutoRound checkpoint; the flag misstates what runs",
                fix=planned,
                severity="warning",
            )
            return
        if (facts.producer == "modelopt" and user.startswith("modelopt")) or (
            facts.producer == "modelopt" and user == "compressed-tensors" and resolved == "modelopt_fp4"
        ):
            # The ModelOpt overrides replace the user's value without an error (vllm/config/model.py, vLLM 0.33.0
            # (docs/reference/vllm-0.33.md §1.5)) except for the FP8_PB_WO / FP8_PER_CHANNEL_PER_TOKEN +
            # modelopt_fp4 combination.
            silent = not (resolved == "modelopt" and user == "modelopt_fp4" and facts.quant_algo != "FP8")
            if silent:
                yield self.finding(
                    f"--quantization {user}: vLLM silently replaces it with {resolved} for "
                    f"this {facts.quant_algo} checkpoint; the flag misstates what runs",
                    fix=planned,
                    severity="warning",
                )
                return
        yield self.finding(
            f"--quantization {user} does not match the checkpoint: vLLM raises 'Quantization method specified in "
            f"the model config ({resolved}) does not match the quantization method specified in the `quantization` "
            f"argument ({user})'",
            fix=planned,
        )
