from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from ..parser import ParsedFlag
from .base import ServeCheck, ServeContext, flag_text, register


@register
class DuplicateFlag(ServeCheck):
    """The same option given twice, where the last value silently wins.

    What it catches
    The same option (or one of its aliases, e.g. -tp and --tensor-parallel-size) twice. Dotted JSON overrides
    (--speculative-config.method) and the repeatable -O levels are not duplicates.

    Why it matters
    The last value wins silently (vLLM only logs 'Found duplicate keys' for JSON keys), so the command does not do
    what its first occurrence says.

    Anti-pattern
    Appending an override to a long command instead of editing it.

    Fix
    Keep one occurrence, with the value you mean (the finding gives the one that wins today).

    Source
    vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args (0.33.0 wheel)
    """

    code = "CS103"
    slug = "duplicate-flag"
    severity = "warning"
    title = "Flag given twice"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        seen: dict[str, ParsedFlag] = {}
        for f in ctx.cmd.flags:
            if not f.known:
                continue
            if f.name in seen and not f.json_path and f.name != "--optimization-level":
                yield self.finding(
                    f"{f.name} is given twice ({seen[f.name].spelled}, {f.spelled}); the last value wins",
                    fix=flag_text(f.name, f.value),
                    details={"flag": f.name},
                )
            seen.setdefault(f.name, f)
