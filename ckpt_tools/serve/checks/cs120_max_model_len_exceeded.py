from __future__ import annotations

from collections.abc import Iterable

from ...plan.limits import context_refusal
from ...rules.base import Finding
from .base import ServeCheck, ServeContext, flag_text, parse_int, register


@register
class MaxModelLenExceeded(ServeCheck):
    """--max-model-len above the context length vLLM derives from the checkpoint's config.

    What it catches
    --max-model-len larger than the length vLLM derives from config.json (max_position_embeddings and friends, RoPE
    factor). With the runtime's long-context variable set (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1) vLLM starts, and the
    finding is a warning. One verdict with `ckpt plan --max-model-len` (which answers "fits NO" with the same words)
    and `ckpt serve-flags --max-model-len` (whose command never sets the variable for you, so it is refused the
    same way): ckpt_tools/plan/limits.py.

    Why it matters
    vLLM raises 'User-specified max_model_len ... is greater than the derived max_model_len' unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and then RoPE positions past it give NaN.

    Anti-pattern
    Copying 262144 from a 256k model's card onto a 4k checkpoint.

    Fix
    Use the derived length (given with the finding).

    Source
    vllm/config/model.py _get_and_verify_max_len (0.33.0 wheel)
    """

    code = "CS120"
    slug = "max-model-len-exceeded"
    severity = "error"
    title = "--max-model-len above the checkpoint's context"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        f = ctx.cmd.last("--max-model-len")
        derived = ctx.facts.max_model_len
        if f is None or f.value is None or derived is None:
            return
        try:
            asked = parse_int(f.value, "human_int_or_auto")
        except ValueError:
            return
        env = ctx.rt.behaviour.long_max_model_len_env
        allowed = bool(env) and ctx.cmd.env.get(env or "") not in (None, "", "0")
        finding = context_finding(
            asked, derived, ctx.facts.max_len_key, env=env, allowed=allowed, spelled=f.value.strip()
        )
        if finding is not None:
            yield finding


def context_finding(
    asked: int,
    derived: int | None,
    key: str | None,
    *,
    env: str | None = None,
    allowed: bool = False,
    spelled: str | None = None,
) -> Finding | None:
    """This check's finding on `--max-model-len asked` (`context_refusal` says when and why), or None: what
    check-serve says of a command, and `ckpt plan --max-model-len` of its settings."""
    message = context_refusal(asked, derived, key, env=env, allowed=allowed, spelled=spelled)
    if not message:
        return None
    return MaxModelLenExceeded().finding(
        message, fix=flag_text("--max-model-len", str(derived)), severity="warning" if allowed else None
    )
