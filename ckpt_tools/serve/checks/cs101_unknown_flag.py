from __future__ import annotations

import difflib
from collections.abc import Iterable

from ...rules.base import Finding
from .base import ServeCheck, ServeContext, flag_text, register


@register
class UnknownFlag(ServeCheck):
    """An option the runtime's `vllm serve` does not register.

    What it catches
    An option `vllm serve` of the runtime profile does not register: a typo, a flag of another release, a removed
    flag such as --disable-log-requests. A close spelling of a known flag is offered as the fix.

    Why it matters
    argparse stops with 'unrecognized arguments' before anything loads.

    Anti-pattern
    Copying a serve command from a manual written for another vLLM release.

    Fix
    Remove the flag, or use the spelling the runtime's table lists (rules/runtimes/<profile>.toml [cli]).

    Source
    rules/runtimes/*.toml [cli] (generated from each release's wheel)
    """

    code = "CS101"
    slug = "unknown-flag"
    severity = "error"
    title = "Flag the runtime's CLI does not accept"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        for f in ctx.cmd.flags:
            if f.known:
                continue
            close = difflib.get_close_matches(f.name, list(ctx.rt.flags), n=1, cutoff=0.9)
            hint = f"; did you mean {close[0]}?" if close else ""
            yield self.finding(
                f"{f.spelled} is not an option of {ctx.rt.name}'s `vllm serve`{hint}",
                fix=f"remove {f.spelled}" if not close else flag_text(close[0], f.value),
                details={"flag": f.spelled},
            )
