from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from .base import ServeCheck, ServeContext, register


@register
class AutoToolChoiceWithoutParser(ServeCheck):
    """--enable-auto-tool-choice without a --tool-call-parser to extract the calls.

    What it catches
    Auto tool choice enabled with no tool parser, on a runtime whose server validation requires one (the runtime
    profile's `auto_tool_choice_requires_parser`).

    Why it matters
    vLLM raises 'Error: --enable-auto-tool-choice requires --tool-call-parser' at startup.

    Anti-pattern
    Dropping the parser flag while keeping auto tool choice.

    Fix
    Add the family's --tool-call-parser (given with the finding).

    Source
    vllm/entrypoints/common/cli_args.py validate_parsed_serve_args (0.33.0 wheel)
    """

    code = "CS131"
    slug = "auto-tool-choice-without-parser"
    severity = "error"
    title = "--enable-auto-tool-choice without --tool-call-parser"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        auto = ctx.cmd.last("--enable-auto-tool-choice")
        if (
            auto is not None
            and not auto.negated
            and ctx.value("--tool-call-parser") is None
            and ctx.rt.behaviour.auto_tool_choice_requires_parser
        ):
            yield self.finding(
                "--enable-auto-tool-choice without --tool-call-parser: vLLM "
                "raises 'Error: --enable-auto-tool-choice requires --tool-call-parser'",
                fix=ctx.planned("--tool-call-parser"),
            )
