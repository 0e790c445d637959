from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from ..profiles import serving_family
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
        fam = serving_family(ctx.facts.architecture, ctx.facts.model_type)
        if fam is None:
            return
        for name, key in (("--tool-call-parser", "tool_call_parser"), ("--reasoning-parser", "reasoning_parser")):
            value = ctx.value(name)
            ok = fam.get(key + "s_ok")
            info = ctx.rt.flags.get(name)
            if value is None or not ok or info is None or info.choices is None or value not in info.choices:
                continue
            if value not in ok:
                yield self.finding(
                    f"{name} {value} does not fit {fam['name']} (expected one of {ok})",
                    fix=flag_text(name, fam[key]),
                )
