"""rules/transformers.toml: transformers' model classes (what vLLM's Transformers backend can fall back to)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from ._load import Table, build_file


@dataclass(frozen=True)
class TransformersClasses:
    version: str
    source: str
    classes: frozenset[str]
    base_model: Mapping[str, str]  # model_type -> base class (what vLLM uses when `architectures` is missing)
    causal_lm: Mapping[str, str]  # model_type -> causal LM class


def parse(root: Table) -> TransformersClasses:
    return TransformersClasses(
        root.string("version"),
        root.string("source"),
        frozenset(root.strs("classes")),
        root.mapping("base_model"),
        root.mapping("causal_lm"),
    )


@cache
def transformers_classes() -> TransformersClasses:
    return build_file("transformers.toml", parse, "transformers/1")
