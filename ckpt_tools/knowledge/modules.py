"""rules/modules.toml: how vLLM builds linear modules (fused shard groups, tensor-parallel styles, modules built
without a quant config) and the config / module names every model file agrees on."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from ._load import REQUIRED, Table, build_file


@dataclass(frozen=True)
class FusedGroup:
    id: str
    fused: str
    shards: tuple[str, ...]
    families: tuple[str, ...]  # empty: every family
    source: str

    def applies_to(self, family_id: str) -> bool:
        return not self.families or family_id in self.families


@dataclass(frozen=True)
class Parallel:
    column: frozenset[str]
    row: frozenset[str]
    tp_candidates: tuple[int, ...]
    source: str


@dataclass(frozen=True)
class ModelUnquantized:
    id: str
    pattern: re.Pattern[str]
    families: tuple[str, ...]
    producers: tuple[str, ...]
    when_config: tuple[str, ...]
    reason: str
    source: str
    except_architectures: tuple[str, ...]  # model classes that do pass their quant config to these modules


@dataclass(frozen=True)
class ModelConfig:
    expert_count_keys: tuple[str, ...]
    embedding_substring: str
    embedding_names: frozenset[str]
    count_limit: int  # a config count past this is not believed (rules/modules.toml)
    source: str

    def is_embedding(self, last_segment: str) -> bool:
        return self.embedding_substring in last_segment or last_segment in self.embedding_names


@dataclass(frozen=True)
class Modules:
    fused: tuple[FusedGroup, ...]
    parallel: Parallel
    unquantized: tuple[ModelUnquantized, ...]
    model_config: ModelConfig


def _fused(t: Table) -> FusedGroup:
    return FusedGroup(
        t.string("id"), t.string("fused"), t.strs("shards", REQUIRED), t.strs("families"), t.string("source")
    )


def _unquantized(t: Table) -> ModelUnquantized:
    return ModelUnquantized(
        id=t.string("id"),
        pattern=t.regex("pattern"),
        families=t.strs("families"),
        producers=t.strs("producers"),
        when_config=t.strs("when_config"),
        reason=t.string("reason"),
        source=t.string("source"),
        except_architectures=t.strs("except_architectures"),
    )


def parse(root: Table) -> Modules:
    p, m = root.table("parallel"), root.table("model_config")
    out = Modules(
        fused=root.each("fused", _fused, required=True),
        parallel=Parallel(
            frozenset(p.strs("column", REQUIRED)),
            frozenset(p.strs("row", REQUIRED)),
            p.ints("tp_candidates", REQUIRED),
            p.string("source"),
        ),
        unquantized=root.each("unquantized", _unquantized),
        model_config=ModelConfig(
            m.strs("expert_count_keys", REQUIRED),
            m.string("embedding_substring"),
            frozenset(m.strs("embedding_names")),
            m.integer("count_limit"),
            m.string("source"),
        ),
    )
    p.done()
    m.done()
    return out


@cache
def modules() -> Modules:
    return build_file("modules.toml", parse, "modules/1")


def fused_groups() -> tuple[FusedGroup, ...]:
    return modules().fused


@cache
def fused_groups_for(family_id: str) -> tuple[FusedGroup, ...]:
    return tuple(g for g in fused_groups() if g.applies_to(family_id))


def parallel() -> Parallel:
    return modules().parallel


def model_unquantized() -> tuple[ModelUnquantized, ...]:
    return modules().unquantized


def model_config() -> ModelConfig:
    return modules().model_config
