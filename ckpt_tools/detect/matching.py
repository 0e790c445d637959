"""The one name matcher: how vLLM decides whether an ignore / exclude / target entry covers a module.

compressed-tensors (vllm/model_executor/layers/quantization/utils/config_utils.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.5), `is_equal_or_regex_match`): `re:` entries are regexes applied with
`re.match` (anchored at the start only); any other entry must equal the full name. Entries without `re:` that contain
a dot are first translated from checkpoint (HF) names to vLLM names; regexes are not, and are matched against
vLLM-side names (the naming trap: `re:model\\.visual.*` never matches the Qwen3-VL tower, which is `visual.*` in vLLM).

ModelOpt (vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.3), `is_layer_excluded` / `apply_vllm_mapper`): a pattern of two or more characters ending
in `*` not preceded by `.` is split into `X` and `X.*`; patterns are renamed HF->vLLM; then a module is excluded on an
exact match, a substring match (also with a leading `language_model.` removed from the module name), or an fnmatch
match.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import re
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from ..knowledge.architectures import Family

try:  # the parser behind `re.compile`: Python 3.11+ names it re._parser, 3.10 sre_parse
    _sre_parse: Any = importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - Python 3.10
    _sre_parse = importlib.import_module("sre_parse")

# Seconds one checkpoint-supplied regex may spend, summed over every name it is matched against in one analysis.
# vLLM matches these with Python's `re` (a backtracking engine) too, once per module at load: a pattern that needs
# more than this on a checkpoint's names would stall vLLM the same way, so it is reported, not waited for.
REGEX_BUDGET = 1.0


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


class _OverBudget(Exception):
    """Raised by the SIGALRM handler inside a regex match (the `re` engine checks for signals as it backtracks)."""


def _interrupt(signum: int, frame: object) -> None:
    raise _OverBudget


@lru_cache(maxsize=1024)
def _may_backtrack_exponentially(pattern: str) -> bool:
    """Whether `pattern` holds a repetition of something that can itself match in several ways (a repetition, an
    alternation) or a backreference / lookaround: the shapes whose backtracking grows exponentially with the name.
    Used only where no timer can stop a match (off the main thread)."""

    def walk(items: object, inside_repeat: bool) -> bool:
        for op, arg in items:  # type: ignore[attr-defined]
            name = str(op)
            if name in ("GROUPREF", "GROUPREF_EXISTS", "ASSERT", "ASSERT_NOT"):
                return True
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                _low, high, body = arg
                if inside_repeat and high > 1:
                    return True
                if walk(body, inside_repeat or high > 1):
                    return True
            elif name == "BRANCH":
                if inside_repeat:
                    return True
                if any(walk(branch, inside_repeat) for branch in arg[1]):
                    return True
            elif name in ("SUBPATTERN", "ATOMIC_GROUP") and walk(arg[-1], inside_repeat):
                return True
        return False

    try:
        return walk(_sre_parse.parse(pattern), False)
    except Exception:  # noqa: BLE001 - a pattern `re` cannot parse matches nothing anyway
        return True


class RegexBudget:
    """The regexes a checkpoint's config supplies (`re:` ignore / target entries, GPTQ `dynamic` keys, Quark
    excludes), matched with Python's `re` as vLLM does, each under `REGEX_BUDGET` seconds over one analysis. A
    pattern that runs out matches nothing from then on and is listed in `slow` (CK304 reports it): a ReDoS pattern
    such as `([\\w.]+)+Z` is stopped by a timer instead of hanging the analysis.

    The timer is SIGALRM, which only the main thread can receive: off it (several Hub targets judged at once), a
    pattern with a nested repetition, an alternation under a repetition, a backreference or a lookaround is not
    evaluated at all and is listed in `slow` as well."""

    def __init__(self, seconds: float = REGEX_BUDGET, given_up: Mapping[str, str] | None = None) -> None:
        self.seconds = seconds
        self._spent: dict[str, float] = {}
        # pattern -> why it was given up; `given_up`: what detection already gave up (a rule does not retry it)
        self.slow: dict[str, str] = dict(given_up or {})

    def match(self, pattern: str, name: str) -> bool:
        """`re.match(pattern, name)` as a truth value; False for an invalid pattern or one past its budget."""
        rx = _regex(pattern)
        if rx is None or pattern in self.slow:
            return False
        if not _timer_available():
            if _may_backtrack_exponentially(pattern):
                self.slow[pattern] = "its backtracking can grow exponentially and no timer can stop it here"
                return False
            return rx.match(name) is not None
        left = self.seconds - self._spent.get(pattern, 0.0)
        started = time.perf_counter()
        try:
            with _alarm(left):
                return rx.match(name) is not None
        except _OverBudget:
            self.slow[pattern] = f"it took over {self.seconds:g} s"
            return False
        finally:
            self._spent[pattern] = self._spent.get(pattern, 0.0) + time.perf_counter() - started


def _timer_available() -> bool:
    """SIGALRM can interrupt a match here: the main thread, on a platform that has it, no other handler or timer."""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, _interrupt)
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    )


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    if seconds <= 0:
        raise _OverBudget
    previous = signal.signal(signal.SIGALRM, _interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def ct_entry_matches(entry: str, vllm_name: str, family: Family, budget: RegexBudget) -> bool:
    """compressed-tensors / vLLM `is_equal_or_regex_match` after `apply_vllm_mapper`."""
    if entry.startswith("re:"):
        return budget.match(entry[3:], vllm_name)
    if "." in entry:
        entry = family.to_vllm(entry)
    return entry == vllm_name


def ct_first_match(entries: Iterable[str], vllm_name: str, family: Family, budget: RegexBudget) -> str | None:
    for entry in entries:
        if isinstance(entry, str) and ct_entry_matches(entry, vllm_name, family, budget):
            return entry
    return None


class CtMatcher:
    """`ct_first_match` over a fixed entry list, prepared once: exact entries are one dict lookup, so matching every
    module of a checkpoint costs O(modules x regex entries), not O(modules x entries) (llm-compressor writes one
    exact ignore entry per skipped module, hundreds of them on a big MoE)."""

    def __init__(self, entries: Iterable[str], family: Family, budget: RegexBudget) -> None:
        self._budget = budget
        self._exact: dict[str, tuple[int, str]] = {}
        self._regexes: list[tuple[int, str]] = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, str):
                continue
            if entry.startswith("re:"):
                if _regex(entry[3:]) is not None:
                    self._regexes.append((i, entry))
            else:
                self._exact.setdefault(family.to_vllm(entry) if "." in entry else entry, (i, entry))

    def first(self, vllm_name: str) -> str | None:
        """The first entry, in list order, that covers `vllm_name` (what `ct_first_match` returns)."""
        exact = self._exact.get(vllm_name)
        for i, entry in self._regexes:
            if exact is not None and i > exact[0]:
                break
            if self._budget.match(entry[3:], vllm_name):
                return entry
        return exact[1] if exact is not None else None


def modelopt_patterns(entries: Iterable[str], family: Family) -> list[tuple[str, str]]:
    """(original entry, vLLM-side pattern) pairs after `apply_vllm_mapper`'s `*` split and prefix rename."""
    out: list[tuple[str, str]] = []
    for entry in entries:
        if not isinstance(entry, str):
            continue
        variants = [entry]
        # `len >= 2` as in vLLM: a bare `*` stays `*` (fnmatch excludes everything); an empty entry is kept too,
        # because `"" in prefix` holds for every module (vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.3), substring rule).
        if len(entry) >= 2 and entry.endswith("*") and entry[-2] != ".":
            variants = [entry[:-1], entry[:-1] + ".*"]
        out.extend((entry, family.to_vllm(v)) for v in variants)
    return out


def modelopt_excluded_by(patterns: list[tuple[str, str]], vllm_name: str) -> str | None:
    """The exclude entry that covers `vllm_name` under ModelOpt's exact / substring / fnmatch rules, if any."""
    stripped = vllm_name[len("language_model.") :] if vllm_name.startswith("language_model.") else None
    for original, pattern in patterns:
        if pattern == vllm_name:
            return original
        if pattern in vllm_name or (stripped is not None and pattern in stripped):
            return original
        if any(ch in pattern for ch in "*?[") and fnmatch.fnmatchcase(vllm_name, pattern):
            return original
    return None
