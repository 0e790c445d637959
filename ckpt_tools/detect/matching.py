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

import fnmatch
import re
from collections.abc import Iterable
from functools import lru_cache

from ..knowledge.architectures import Family


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None


def ct_entry_matches(entry: str, vllm_name: str, family: Family) -> bool:
    """compressed-tensors / vLLM `is_equal_or_regex_match` after `apply_vllm_mapper`."""
    if entry.startswith("re:"):
        rx = _regex(entry[3:])
        return bool(rx and rx.match(vllm_name))
    if "." in entry:
        entry = family.to_vllm(entry)
    return entry == vllm_name


def ct_first_match(entries: Iterable[str], vllm_name: str, family: Family) -> str | None:
    for entry in entries:
        if isinstance(entry, str) and ct_entry_matches(entry, vllm_name, family):
            return entry
    return None


class CtMatcher:
    """`ct_first_match` over a fixed entry list, prepared once: exact entries are one dict lookup, so matching every
    module of a checkpoint costs O(modules x regex entries), not O(modules x entries) (llm-compressor writes one
    exact ignore entry per skipped module, hundreds of them on a big MoE)."""

    def __init__(self, entries: Iterable[str], family: Family) -> None:
        self._exact: dict[str, tuple[int, str]] = {}
        self._regexes: list[tuple[int, str, re.Pattern[str]]] = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, str):
                continue
            if entry.startswith("re:"):
                rx = _regex(entry[3:])
                if rx is not None:
                    self._regexes.append((i, entry, rx))
            else:
                self._exact.setdefault(family.to_vllm(entry) if "." in entry else entry, (i, entry))

    def first(self, vllm_name: str) -> str | None:
        """The first entry, in list order, that covers `vllm_name` (what `ct_first_match` returns)."""
        exact = self._exact.get(vllm_name)
        for i, entry, rx in self._regexes:
            if exact is not None and i > exact[0]:
                break
            if rx.match(vllm_name):
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
