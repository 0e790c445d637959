from __future__ import annotations

import shlex
from collections.abc import Iterable

from ...rules.base import Finding
from .base import ServeCheck, ServeContext, register


@register
class ServedModelMismatch(ServeCheck):
    """The command serves another checkpoint than the one checked.

    What it catches
    A `vllm serve` / `docker run` command whose model (the positional MODEL, `--model`, or the host folder a
    container path is mounted from) is another folder on this machine, or another Hub repo, than the TARGET given
    to `ckpt check-serve`. A path that does not exist here (the command may run elsewhere), a bare word, an
    unmounted container path or a local folder of unknown Hub origin is not flagged: nothing here can tell.

    Why it matters
    Every other finding of the report is about TARGET: the command would load a checkpoint nobody checked, and a
    clean verdict says nothing about it.

    Anti-pattern
    `ckpt check-serve ./llama-nvfp4-fixed -- vllm serve ./llama-nvfp4` after a repair that wrote a copy.

    Fix
    Check the checkpoint the command serves (`ckpt check-serve SERVED -- ...`), or serve the one checked.

    Source
    vllm/entrypoints/cli/serve.py ServeSubcommand.cmd: the positional model tag, else --model, is the model loaded
    """

    code = "CS107"
    slug = "served-model-mismatch"
    severity = "error"
    title = "Command serves another checkpoint"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        other = ctx.served_elsewhere
        if other is None:
            return
        how = f" ({other.note})" if other.note else ""
        yield self.finding(
            f"the command serves {other.served}{how}, not the checked {ctx.plan.target}: this report says nothing "
            "about the checkpoint it would load",
            fix=f"ckpt check-serve {shlex.quote(other.checkable)} -- ...",
            details={"served": other.served},
        )
