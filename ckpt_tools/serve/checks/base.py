"""The serve-check contract, the CK rules' own (ckpt_tools/rules/base.py `Check`) applied to a serve command: a
small class with a stable CS code and slug, a default severity, a title, documentation in its docstring (`What it
catches`, `Why it matters`, `Anti-pattern`, `Fix`, `Source`) and a pure `check(ctx)` that yields findings. A check
never does I/O: what it needs is in `ServeContext` (which reads the drafter's headers once, when asked); `ckpt
explain` and docs/rules.md print its docstring."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, ClassVar

from ...errors import CkptError
from ...knowledge.hardware import Hardware
from ...knowledge.runtimes import Runtime
from ...pipeline import Analysis
from ...rules.base import Check, Finding, Registry
from ..facts import CheckpointFacts
from ..flags import ServePlan
from ..parser import ParsedCommand
from ..served_model import ServedModel, different_model

HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT])$")


def flag_text(flag: str, value: str | None) -> str:
    return shlex.join([flag] + ([value] if value is not None else []))


def parse_int(text: str, kind: str) -> int:
    """An integer flag value as vLLM's parser reads it: `human_int` accepts 8k / 1M (decimal) and 8K / 1G (binary)
    suffixes, `human_int_or_auto` also -1 / auto."""
    text = text.strip()
    if kind == "human_int_or_auto" and (text == "-1" or text.lower() == "auto"):
        return -1
    m = HUMAN_INT.fullmatch(text) if kind.startswith("human") else None
    if m:
        number, suffix = m.groups()
        mult = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}.get(suffix) or 2 ** (10 * "KMGT".index(suffix) + 10)
        return int(float(number) * mult)
    return int(text)


def flag_int(cmd: ParsedCommand, flag: str, kind: str = "int") -> int | None:
    """The last value of `flag` in the command as an integer (`parse_int`); None when the flag is absent, has no value
    or is not a number (the flag table's value check reports that)."""
    f = cmd.last(flag)
    if f is None or f.value is None:
        return None
    try:
        return parse_int(f.value, kind)
    except ValueError:
        return None


@dataclass(frozen=True)
class ServeContext:
    """Everything a serve check may look at: the parsed command, the runtime and hardware profiles, the checkpoint's
    facts and analysis, the reference plan for the checkpoint (whose flags are the fixes), and the drafter path the
    command's speculative config names."""

    cmd: ParsedCommand
    rt: Runtime
    hw: Hardware | None
    facts: CheckpointFacts
    plan: ServePlan
    analysis: Analysis
    drafter_path: str | None = None

    @cached_property
    def drafter_analysis(self) -> Analysis | None:
        """The headers-only analysis of the drafter folder the command names, when it is one on this machine."""
        if not self.drafter_path or not os.path.isdir(self.drafter_path):
            return None
        from ...pipeline import analyze

        try:
            return analyze(self.drafter_path, runtime=self.rt.id, headers_only=True)
        except CkptError:
            return None

    @cached_property
    def served_elsewhere(self) -> ServedModel | None:
        """The model the command serves when it is certainly another checkpoint than the target (paths resolved,
        mounts followed, a folder's Hub repo looked up), else None."""
        return different_model(self.plan.target, self.cmd)

    def value(self, name: str) -> str | None:
        f = self.cmd.last(name)
        return f.value if f is not None else None

    def planned(self, name: str) -> str | None:
        """The reference plan's own `name VALUE`, the fix for a wrong value of that flag."""
        for f in self.plan.flags:
            if f.flag == name:
                return flag_text(f.flag, f.value)
        return None


class ServeCheck(Check):
    reported_by: ClassVar[str | None] = "ckpt check-serve"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        raise NotImplementedError

    def finding(
        self,
        message: str,
        *,
        fix: str | None = None,
        severity: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> Finding:
        """A finding about the command: no tensors or files, count 1."""
        return Finding(
            code=self.code,
            slug=self.slug,
            severity=severity or self.severity,
            message=message,
            count=1,
            fix=fix,
            details=MappingProxyType(dict(details or {})),
        )


_CHECKS: Registry[ServeCheck] = Registry("check", "ckpt_tools.serve.checks")
register = _CHECKS.register


def all_checks() -> list[type[ServeCheck]]:
    return _CHECKS.all()


def find_check(code_or_slug: str) -> type[ServeCheck] | None:
    return _CHECKS.find(code_or_slug)


def run_checks(ctx: ServeContext) -> tuple[Finding, ...]:
    """Every serve check on one command, in code order."""
    return tuple(f for check in all_checks() for f in check().check(ctx))
