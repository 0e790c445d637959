from __future__ import annotations

from collections.abc import Iterable

from .base import Context, Finding, Rule, register


@register
class ProducerSchema(Rule):
    """The quantization config fails the producer's own schema (runs with `--producer-schema`).

    What it catches
    A compressed-tensors `quantization_config` that compressed-tensors' own pydantic `QuantizationConfig` rejects
    (unknown strategy, wrong types, ...), or a ModelOpt config.json `quantization_config` that differs from what
    ModelOpt's own `convert_hf_quant_config_format` derives from hf_quant_config.json. Needs the `producers` extra
    (`pip install "ckpt-tools[producers]"`), which imports torch; off by default.

    Why it matters
    vLLM parses these configs with the same models: a config the producer rejects fails at start-up, and a hand-edited
    flat config that no longer matches hf_quant_config.json means the two files describe different checkpoints.

    Anti-pattern
    Editing `quantization_config` by hand, or copying it between checkpoints made by different producer versions.

    Fix
    Regenerate the config with the producer (llm-compressor `save_pretrained`, ModelOpt `export_hf_checkpoint`).
    """

    code = "CK311"
    slug = "producer-schema"
    severity = "error"
    title = "Quantization config fails the producer's own schema"

    def check(self, ctx: Context) -> Iterable[Finding]:
        result = ctx.producer_schema
        if result is None or not result.errors:
            return
        shown = "; ".join(result.errors[:3]) + (f" (+{len(result.errors) - 3} more)" if len(result.errors) > 3 else "")
        files = ["config.json"] + (["hf_quant_config.json"] if result.producer == "modelopt" else [])
        yield self.finding(
            f"{result.package} rejects the quantization config: {shown}.",
            files=[f for f in files if f in ctx.ckpt.files],
            count=len(result.errors),
            details={"producer": result.producer, "package": result.package, "errors": list(result.errors)},
        )
