from __future__ import annotations

import difflib
import json
from collections.abc import Iterable

from ...knowledge.serving import serving
from ...rules.base import Finding
from ..parser import ParsedFlag
from ._vision import mm_limits
from .base import ServeCheck, ServeContext, flag_text, parse_int, register


@register
class InvalidFlagValue(ServeCheck):
    """A flag value the runtime's parser or config validation rejects.

    What it catches
    A value outside the flag's choices (e.g. --tool-call-parser qwen3), of the wrong type, out of range, malformed
    JSON, a missing value, a value on a switch, or --limit-mm-per-prompt modalities vLLM does not know.

    Why it matters
    vLLM fails at argument parsing or config validation, before the model loads.

    Anti-pattern
    --tool-call-parser qwen3 (qwen3 exists only as a reasoning parser).

    Fix
    Use the corrected value given with the finding: the model family's parser, the reference plan's value, or the
    closest accepted choice.

    Source
    vllm/engine/arg_utils.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §7.1); rules/runtimes/*.toml [choices],
    [flags]
    """

    code = "CS102"
    slug = "invalid-flag-value"
    severity = "error"
    title = "Flag value the runtime rejects"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        for f in ctx.cmd.flags:
            if not f.known:
                continue
            problem = _value_problem(ctx, f)
            if problem:
                message, fix = problem
                yield self.finding(message, fix=fix, details={"flag": f.name})
        mm = mm_limits(ctx)
        if mm.parsed and mm.unknown:
            yield self.finding(
                f"--limit-mm-per-prompt has unknown modalities {list(mm.unknown)}; vLLM knows {list(mm.modalities)}",
                fix=ctx.planned("--limit-mm-per-prompt"),
                details={"flag": "--limit-mm-per-prompt"},
            )


def _value_problem(ctx: ServeContext, f: ParsedFlag) -> tuple[str, str | None] | None:
    info = ctx.rt.flags[f.name]
    if f.json_path:
        return None
    if info.arity == "value" and f.value is None:
        return f"{f.spelled} needs a value", ctx.planned(f.name)
    if info.arity in ("boolean", "switch") and f.value is not None and "=" in f.spelled:
        return f"{f.spelled} takes no value", f.name
    if f.value is None:
        return None
    kind = info.type
    if info.choices is not None:
        value = info.normalize(f.value)
        if value not in info.choices:
            better = _choice_fix(ctx, f.name) or difflib.get_close_matches(value, info.choices, n=1)
            fix = better if isinstance(better, str) else (flag_text(f.name, better[0]) if better else None)
            extra = (
                " (qwen3 is a reasoning parser, not a tool parser)"
                if (f.name == "--tool-call-parser" and value == "qwen3")
                else ""
            )
            return f"{f.name} {f.value!r} is not accepted by {ctx.rt.name}{extra}", fix
        return None
    try:
        if kind in ("int", "human_int", "human_int_or_auto"):
            number: float = parse_int(f.value, kind)
        elif kind == "float":
            number = float(f.value)
        elif kind == "json":
            json.loads(f.value)
            return None
        else:
            return None
    except (ValueError, json.JSONDecodeError) as exc:
        return f"{f.name} {f.value!r} is not a valid {kind} ({exc})", ctx.planned(f.name)
    spec = info.spec
    if (spec.gt is not None and not number > spec.gt) or (spec.le is not None and not number <= spec.le):
        return f"{f.name} {f.value} is out of range", ctx.planned(f.name)
    return None


def _choice_fix(ctx: ServeContext, name: str) -> str | None:
    """The model family's parser for a parser flag, else the reference plan's value."""
    fam = serving().family(ctx.facts.architecture, ctx.facts.model_type)
    wanted = None
    if fam is not None:
        wanted = {"--tool-call-parser": fam.tool_call_parser, "--reasoning-parser": fam.reasoning_parser}.get(name)
    if wanted:
        return flag_text(name, wanted)
    return ctx.planned(name)
