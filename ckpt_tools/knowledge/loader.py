"""rules/loader.toml: the load model's knowledge of vLLM's model classes (name handling, stacking, experts, the
embedding) and of which scale tables (rules/scales.toml) each quantization method builds."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from ._load import REQUIRED, Table, build_file

EMBEDDING_TARGETS = ("class", "name")


@dataclass(frozen=True)
class Embedding:
    quant_config: bool  # whether the class passes its quant config to VocabParallelEmbedding at all
    targets: tuple[str, ...]  # compressed-tensors target kinds that can match it (EMBEDDING_TARGETS)


@dataclass(frozen=True)
class ModelClass:
    id: str
    architectures: tuple[str, ...]
    default: bool
    inner_class: str
    inner_prefix: str
    # The text model's own hf_to_vllm_mapper, which its load_weights applies to the names the class hands it:
    # (vLLM name prefix after the class's mapper, the prefix it becomes).
    inner_prefix_map: tuple[tuple[str, str], ...]
    stacked: tuple[tuple[str, str, str], ...]  # (fused, checkpoint shard, shard id)
    row_parallel: frozenset[str]
    experts: tuple[tuple[str, str, str], ...]  # (fused parameter prefix, checkpoint projection, shard id)
    tolerated_suffixes: tuple[str, ...]
    embedding: Embedding | None  # None: how the class builds its embedding is not modelled
    source: str


@dataclass(frozen=True)
class Method:
    quantization: str
    kind: str
    when: str | None  # a config key that must be present (`key`) or absent (`!key`)
    schemes: tuple[str, ...]  # rules/scales.toml scheme ids, in order of preference
    weight_only_unused: frozenset[str]
    source: str


@dataclass(frozen=True)
class Loader:
    release: str  # the vLLM release the file describes
    skip: re.Pattern[str]  # the names every class skips on purpose, one alternation of the file's patterns
    models: tuple[ModelClass, ...]
    methods: tuple[Method, ...]
    unquantized: frozenset[str]
    unquantized_optional: frozenset[str]
    exclusion_keys: tuple[str, ...]  # config keys listing the modules a method builds unquantized


def _triples(t: Table, key: str) -> tuple[tuple[str, str, str], ...]:
    rows = t._get(key, (list,), "a list of [string, string, string] lists", [])
    out = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and all(isinstance(x, str) for x in row)):
            raise t.error(key, "each entry must be a list of three strings")
        out.append((row[0], row[1], row[2]))
    return tuple(out)


def _embedding(t: Table) -> Embedding:
    targets = t.strs("targets", REQUIRED)
    bad = [x for x in targets if x not in EMBEDDING_TARGETS]
    if bad:
        raise t.error("targets", f"unknown target kind(s) {bad}; expected {list(EMBEDDING_TARGETS)}")
    return Embedding(t.boolean("quant_config"), targets)


def _model(t: Table) -> ModelClass:
    return ModelClass(
        id=t.string("id"),
        architectures=t.strs("architectures", REQUIRED),
        default=t.boolean("default", False),
        inner_class=t.string("inner_class"),
        inner_prefix=t.string("inner_prefix"),
        inner_prefix_map=t.pairs("inner_prefix_map"),
        stacked=_triples(t, "stacked"),
        row_parallel=frozenset(t.strs("row_parallel")),
        experts=_triples(t, "experts"),
        tolerated_suffixes=t.strs("tolerated_suffixes"),
        embedding=t.opt_one("embedding", _embedding),
        source=t.string("source"),
    )


def _method(t: Table) -> Method:
    return Method(
        quantization=t.string("quantization"),
        kind=t.string("kind"),
        when=t.opt_string("when"),
        schemes=t.strs("schemes", REQUIRED),
        weight_only_unused=frozenset(t.strs("weight_only_unused")),
        source=t.string("source"),
    )


def parse(root: Table) -> Loader:
    skip = root.table("skip")
    unquantized = root.table("unquantized")
    exclusions = root.table("exclusions")
    out = Loader(
        release=root.string("release"),
        skip=re.compile("|".join(f"(?:{p})" for p in skip.strs("patterns", REQUIRED))),
        models=root.each("model", _model, required=True),
        methods=root.each("method", _method, required=True),
        unquantized=frozenset(unquantized.strs("parameters", REQUIRED)),
        unquantized_optional=frozenset(unquantized.strs("optional")),
        exclusion_keys=exclusions.strs("config_keys", REQUIRED),
    )
    exclusions.string("source")
    exclusions.done()
    skip.string("source")
    skip.done()
    unquantized.string("source")
    unquantized.done()
    return out


@cache
def loader() -> Loader:
    return build_file("loader.toml", parse, "loader/1")


@cache
def model_class(architecture: str | None) -> ModelClass:
    """The model class entry for a config.json architecture, else the default entry."""
    models = loader().models
    return next((m for m in models if architecture in m.architectures), None) or next(m for m in models if m.default)


def methods_for(quantization: str | None, kind: str) -> tuple[Method, ...]:
    return tuple(m for m in loader().methods if m.quantization == quantization and m.kind == kind)
