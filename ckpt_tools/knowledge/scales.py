"""rules/scales.toml: the scale tensors vLLM expects beside each quantized weight, per producer and scheme kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from types import MappingProxyType

from ._load import REQUIRED, Table, build_file


@dataclass(frozen=True)
class TensorSpec:
    suffix: str
    role: str  # `weight` for the weight itself, `scale` otherwise
    dtypes: tuple[str, ...]
    shape: str  # a shape kind of the file's header (packed4, group, scalar, ...)
    required: bool
    activation: str | None
    convention: str | None  # direct / reciprocal global scales


@dataclass(frozen=True)
class ScaleScheme:
    id: str
    producer: str
    kind: str
    group_size: int | None
    block_size: tuple[int, int] | None
    tensors: tuple[TensorSpec, ...]
    weight: TensorSpec  # the tensor with role `weight`
    source: str

    def spec(self, suffix: str) -> TensorSpec | None:
        return next((t for t in self.tensors if t.suffix == suffix), None)


@dataclass(frozen=True)
class GlobalScales:
    weight: tuple[str, ...]  # NVFP4 per-tensor weight global scales, ModelOpt then compressed-tensors spelling
    input: tuple[str, ...]  # the same for activations
    source: str


@dataclass(frozen=True)
class Scales:
    float_scale_dtypes: tuple[str, ...]
    global_scales: GlobalScales
    schemes: tuple[ScaleScheme, ...]


def _tensor(t: Table) -> TensorSpec:
    return TensorSpec(
        suffix=t.string("suffix"),
        role=t.choice("role", ("weight", "scale"), "scale"),
        dtypes=t.strs("dtypes", REQUIRED),
        shape=t.string("shape"),
        required=t.boolean("required", False),
        activation=t.opt_string("activation"),
        convention=t.choice("convention", ("direct", "reciprocal"), None),
    )


def _scheme(t: Table) -> ScaleScheme:
    tensors = t.each("tensors", _tensor, required=True)
    weights = [s for s in tensors if s.role == "weight"]
    if len(weights) != 1:
        raise t.error("tensors", f"a [[scheme]] needs exactly one tensor with role = 'weight', has {len(weights)}")
    block = t.ints("block_size", None)
    if block and len(block) != 2:
        raise t.error("block_size", "'block_size' must be [rows, columns]")
    return ScaleScheme(
        id=t.string("id"),
        producer=t.string("producer"),
        kind=t.string("kind"),
        group_size=t.opt_integer("group_size"),
        block_size=(block[0], block[1]) if block else None,
        tensors=tensors,
        weight=weights[0],
        source=t.string("source"),
    )


def parse(root: Table) -> Scales:
    g = root.table("global_scales")
    out = Scales(
        root.strs("float_scale_dtypes", REQUIRED),
        GlobalScales(g.strs("weight", REQUIRED), g.strs("input", REQUIRED), g.string("source")),
        root.each("scheme", _scheme, required=True),
    )
    g.done()
    return out


@cache
def scales() -> Scales:
    return build_file("scales.toml", parse, "scales/1")


def schemes() -> tuple[ScaleScheme, ...]:
    return scales().schemes


def global_scales() -> GlobalScales:
    return scales().global_scales


@lru_cache(maxsize=1024)
def scheme_for(kind: str, suffixes: frozenset[str], dtype: str, producer: str | None = None) -> ScaleScheme | None:
    """The scale table whose weight tensor (suffix and dtype) is what this module stores, for a scheme kind: the one
    naming most of the module's tensors, the producer's own table among equals."""
    fits = [s for s in schemes() if s.kind == kind and s.weight.suffix in suffixes and dtype in s.weight.dtypes]
    fits.sort(key=lambda s: (-sum(t.suffix in suffixes for t in s.tensors), s.producer != producer))
    return fits[0] if fits else None


@cache
def global_scale_conventions() -> Mapping[str, str]:
    """Suffix -> `direct` / `reciprocal`, over every scheme that declares a convention."""
    return MappingProxyType({t.suffix: t.convention for s in schemes() for t in s.tensors if t.convention})
