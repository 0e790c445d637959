"""Typed views of the catalogue data in `rules/` that the rule catalogue applies: fused shard groups and
tensor-parallel styles (`modules.toml`), scale-suffix tables per producer (`scales.toml`), KV-cache scale spellings
(`kv_scales.toml`), foreign layouts and declared components (`layouts.toml`), reader dtype support (`dtypes.toml`).

Schemas: rules/README.md. Code never hard-codes these facts; every entry in the files carries its `source`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache
from typing import Any

from .knowledge import load_toml


def _tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


# ---- modules.toml -------------------------------------------------------------------------------------------------


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
    except_architectures: tuple[str, ...] = ()  # model classes that do pass their quant config to these modules


@cache
def fused_groups() -> tuple[FusedGroup, ...]:
    return tuple(
        FusedGroup(g["id"], g["fused"], tuple(g["shards"]), _tuple(g.get("families")), g["source"])
        for g in load_toml("modules.toml")["fused"]
    )


def fused_groups_for(family_id: str) -> tuple[FusedGroup, ...]:
    return tuple(g for g in fused_groups() if g.applies_to(family_id))


@cache
def parallel() -> Parallel:
    p = load_toml("modules.toml")["parallel"]
    return Parallel(frozenset(p["column"]), frozenset(p["row"]), tuple(p["tp_candidates"]), p["source"])


@cache
def model_unquantized() -> tuple[ModelUnquantized, ...]:
    return tuple(
        ModelUnquantized(
            u["id"],
            re.compile(u["pattern"]),
            _tuple(u.get("families")),
            _tuple(u.get("producers")),
            _tuple(u.get("when_config")),
            u["reason"],
            u["source"],
            _tuple(u.get("except_architectures")),
        )
        for u in load_toml("modules.toml").get("unquantized", [])
    )


# ---- scales.toml --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    suffix: str
    role: str
    dtypes: tuple[str, ...]
    shape: str
    required: bool
    activation: str | None
    convention: str | None


@dataclass(frozen=True)
class ScaleScheme:
    id: str
    producer: str
    kind: str
    group_size: int | None
    block_size: tuple[int, int] | None
    tensors: tuple[TensorSpec, ...]
    source: str

    @cached_property
    def weight(self) -> TensorSpec:
        return next(t for t in self.tensors if t.role == "weight")

    def spec(self, suffix: str) -> TensorSpec | None:
        return next((t for t in self.tensors if t.suffix == suffix), None)


@cache
def scale_schemes() -> tuple[ScaleScheme, ...]:
    out = []
    for s in load_toml("scales.toml")["scheme"]:
        tensors = tuple(
            TensorSpec(
                t["suffix"],
                t.get("role", "scale"),
                tuple(t["dtypes"]),
                t["shape"],
                bool(t.get("required")),
                t.get("activation"),
                t.get("convention"),
            )
            for t in s["tensors"]
        )
        block = s.get("block_size")
        out.append(
            ScaleScheme(
                s["id"],
                s["producer"],
                s["kind"],
                s.get("group_size"),
                (int(block[0]), int(block[1])) if block else None,
                tensors,
                s["source"],
            )
        )
    return tuple(out)


@lru_cache(maxsize=1024)
def scheme_for(kind: str, suffixes: frozenset[str], dtype: str, producer: str | None = None) -> ScaleScheme | None:
    """The scale table whose weight tensor (suffix and dtype) is what this module stores, for a scheme kind: the one
    naming most of the module's tensors, the producer's own table among equals."""
    fits = [s for s in scale_schemes() if s.kind == kind and s.weight.suffix in suffixes and dtype in s.weight.dtypes]
    fits.sort(key=lambda s: (-sum(t.suffix in suffixes for t in s.tensors), s.producer != producer))
    return fits[0] if fits else None


def global_scale_conventions() -> dict[str, str]:
    """Suffix -> `direct` / `reciprocal`, over every scheme that declares a convention."""
    return {t.suffix: t.convention for s in scale_schemes() for t in s.tensors if t.convention}


# ---- kv_scales.toml -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvSpelling:
    id: str
    pattern: re.Pattern[str]
    writer: str
    status: str
    methods: tuple[str, ...]
    consequence: str | None
    source: str


@cache
def kv_spellings() -> tuple[KvSpelling, ...]:
    return tuple(
        KvSpelling(
            k["id"],
            re.compile(k["pattern"]),
            k["writer"],
            k["status"],
            _tuple(k.get("methods")),
            k.get("consequence"),
            k["source"],
        )
        for k in load_toml("kv_scales.toml")["spelling"]
    )


KV_SUFFIXES = ("k_scale", "v_scale", "q_scale", "kv_scale")


def is_kv_scale_name(name: str) -> bool:
    """A tensor that is a KV-cache (attention) scale: `*.k_scale`, `*.v_scale`, `*.q_scale`, `*.kv_scale`, or a
    q/k/v projection's `output_scale`."""
    suffix = name.rsplit(".", 1)[-1]
    if suffix in KV_SUFFIXES:
        return True
    return suffix == "output_scale" and bool(re.search(r"\.[kvq]_proj\.output_scale$", name))


def classify_kv(name: str) -> KvSpelling | None:
    for spelling in kv_spellings():
        if spelling.pattern.search(name):
            return spelling
    return None


# ---- layouts.toml -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForeignLayout:
    id: str
    name: str
    prefixes: tuple[str, ...]
    architecture_suffix: str | None
    fix: str
    source: str


@dataclass(frozen=True)
class ComponentExpectation:
    id: str
    component: str
    config_keys: tuple[str, ...]
    min_value: int | None
    expect_prefixes: tuple[str, ...]
    expect_component: str | None
    expect_pattern: re.Pattern[str] | None
    known_family_only: bool
    severity: str
    consequence: str
    source: str


@dataclass(frozen=True)
class AlternateWeights:
    pattern: str
    reason: str
    source: str


@cache
def foreign_layouts() -> tuple[ForeignLayout, ...]:
    return tuple(
        ForeignLayout(f["id"], f["name"], tuple(f["prefixes"]), f.get("architecture_suffix"), f["fix"], f["source"])
        for f in load_toml("layouts.toml")["foreign"]
    )


@cache
def component_expectations() -> tuple[ComponentExpectation, ...]:
    out = []
    for c in load_toml("layouts.toml")["component"]:
        pattern = c.get("expect_pattern")
        out.append(
            ComponentExpectation(
                c["id"],
                c["component"],
                tuple(c["config_keys"]),
                c.get("min_value"),
                _tuple(c.get("expect_prefixes")),
                c.get("expect_component"),
                re.compile(pattern) if pattern else None,
                bool(c.get("known_family_only")),
                c["severity"],
                c["consequence"],
                c["source"],
            )
        )
    return tuple(out)


@cache
def alternate_weights() -> tuple[AlternateWeights, ...]:
    return tuple(
        AlternateWeights(a["pattern"], a["reason"], a["source"])
        for a in load_toml("layouts.toml").get("alternate_weights", [])
    )


# ---- dtypes.toml --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReaderSupport:
    name: str
    status: str  # supported / fixed / unsupported
    note: str
    source: str


@dataclass(frozen=True)
class DtypeSupport:
    id: str
    what: str
    report: bool
    readers: tuple[ReaderSupport, ...]


@cache
def dtype_support() -> Mapping[str, DtypeSupport]:
    out = {}
    for d in load_toml("dtypes.toml")["dtype"]:
        readers = tuple(ReaderSupport(r["name"], r["status"], r["note"], r["source"]) for r in d["readers"])
        out[d["id"]] = DtypeSupport(d["id"], d["what"], bool(d["report"]), readers)
    return out


def kv_runtime(runtime_id: str) -> Mapping[str, Any]:
    """What a runtime accepts as a declared KV-cache quantization (`[runtime.<id>]` in kv_scales.toml); falls back
    to the newest profile listed when the runtime has no entry of its own."""
    table = load_toml("kv_scales.toml").get("runtime", {})
    if runtime_id in table:
        return table[runtime_id]
    return table[sorted(table)[-1]] if table else {}


def family_is_explicit(family_id: str, architecture: str | None, model_type: str | None) -> bool:
    """True when rules/architectures.toml lists the checkpoint's architecture or model_type under this family, i.e.
    the layout is known rather than assumed by the fallback family."""
    for raw in load_toml("architectures.toml")["family"]:
        if raw["id"] == family_id:
            return bool(
                (architecture and architecture in raw.get("architectures", []))
                or (model_type and model_type in raw.get("model_types", []))
            )
    return False
