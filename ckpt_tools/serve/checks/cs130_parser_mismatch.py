from __future__ import annotations

from collections.abc import Iterable

from ...knowledge.serving import serving
from ...rules.base import Finding
from .base import ServeCheck, ServeContext, flag_text, register


@register
class ParserMismatch(ServeCheck):
    """A reasoning or tool parser that exists but does not fit the model family.

    What it catches
    A --tool-call-parser or --reasoning-parser the runtime accepts but that is not among the parsers the model
    family's chat template works with (rules/serving.toml `tool_call_parsers_ok` / `reasoning_parsers_ok`). A value
    the runtime does not accept at all is invalid-flag-value.

    Why it matters
    Tool calls or reasoning text are not extracted; clients see raw tags or empty content.

    Anti-pattern
    --tool-call-parser hermes on a Gemma 4 model.

    Fix
    Use the family's parser (given with the finding).

    Source
    vllm/tool_parsers/__init__.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §7.3); rules/serving.toml
    """

    code = "CS130"
    slug = "parser-mismatch"
    severity = "warning"
    title = "Reasoning or tool parser that does not fit the model family"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        fam = serving().family(ctx.facts.architecture, ctx.facts.model_type)
        if fam is None:
            return
        for name, wanted, ok in (
            ("--tool-call-parser", fam.tool_call_parser, list(fam.tool_call_parsers_ok)),
            ("--reasoning-parser", fam.reasoning_parser, list(fam.reasoning_parsers_ok)),
        ):
            value = ctx.value(name)
            info = ctx.rt.flags.get(name)
            if value is None or not ok or info is None or info.choices is None or value not in info.choices:
                continue
            if value not in ok:
                yield self.finding(
                    f"{name} {value} does not fit {fam.name} (expected one of {ok})",
                    fix=flag_text(name, wanted),
                )
