"""rules/architectures.toml: model-family layouts (where each component's tensors live, how vLLM renames them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache

from ._load import REQUIRED, Table, build_file


@dataclass(frozen=True)
class Root:
    component: str
    prefixes: tuple[str, ...]
    children: frozenset[str] | None  # allowed first segments below the root, when known


@dataclass(frozen=True)
class Family:
    id: str
    name: str
    architectures: tuple[str, ...]
    model_types: tuple[str, ...]
    fallback: bool
    roots: tuple[Root, ...]
    vllm_prefix_map: tuple[tuple[str, str], ...]
    dropped_prefixes: tuple[str, ...]
    source: str
    # Memo of root_of over name heads (not knowledge: a lookup cache, excluded from equality and hashing).
    _heads: dict[str, tuple[Root, str] | None] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def root_of(self, name: str) -> tuple[Root, str] | None:
        """The longest root prefix `name` starts with, and that prefix."""
        # Root prefixes span at most two segments, so the first three segments decide; caching on them keeps this
        # O(unique heads) on checkpoints with hundreds of thousands of tensors.
        head = ".".join(name.split(".", 3)[:3])
        if head != name:
            head += "."
        try:
            return self._heads[head]
        except KeyError:
            pass
        best: tuple[Root, str] | None = None
        for root in self.roots:
            for prefix in root.prefixes:
                if head.startswith(prefix) and (best is None or len(prefix) > len(best[1])):
                    best = (root, prefix)
        self._heads[head] = best
        return best

    def canonical_root(self, component: str) -> str | None:
        """Where a component's tensors belong: the first prefix of its main root (the one with known children)."""
        candidates = [r for r in self.roots if r.component == component]
        if not candidates:
            return None
        with_children = [r for r in candidates if r.children is not None]
        return (with_children or candidates)[0].prefixes[0]

    def to_vllm(self, name: str) -> str:
        """The module name vLLM sees for a checkpoint name (hf_to_vllm_mapper prefix rules)."""
        for old, new in self.vllm_prefix_map:
            if name.startswith(old):
                return new + name[len(old) :]
        return name

    def lists(self, architecture: str | None, model_type: str | None) -> bool:
        """Whether the file names this checkpoint's architecture or model_type under this family."""
        return bool(
            (architecture and architecture in self.architectures) or (model_type and model_type in self.model_types)
        )


@dataclass(frozen=True)
class Architectures:
    markers: Mapping[str, tuple[str, ...]]  # component -> path segments that identify it anywhere
    families: tuple[Family, ...]


def _root(t: Table) -> Root:
    children = frozenset(t.strs("children")) if t.has("children") else None
    return Root(t.string("component"), t.strs("prefixes", REQUIRED), children)


def _family(t: Table) -> Family:
    return Family(
        id=t.string("id"),
        name=t.string("name"),
        architectures=t.strs("architectures"),
        model_types=t.strs("model_types"),
        fallback=t.boolean("fallback", False),
        roots=t.each("roots", _root, required=True),
        vllm_prefix_map=t.pairs("vllm_prefix_map"),
        dropped_prefixes=t.strs("dropped_prefixes"),
        source=t.string("source"),
    )


def parse(root: Table) -> Architectures:
    markers = root.table("markers")
    out = Architectures(markers.string_lists(), root.each("family", _family, required=True))
    markers.done()
    if not any(f.fallback for f in out.families):
        raise root.error("family", "no [[family]] has `fallback = true` (unknown text-only models need one)")
    return out


@cache
def architectures() -> Architectures:
    return build_file("architectures.toml", parse, "architectures/1")


def families() -> tuple[Family, ...]:
    return architectures().families


def markers() -> Mapping[str, tuple[str, ...]]:
    return architectures().markers


@cache
def family_for(architecture: str | None, model_type: str | None) -> Family:
    """The first family listing the architecture, else the first listing the model_type, else the fallback."""
    fams = families()
    return (
        next((f for f in fams if architecture and architecture in f.architectures), None)
        or next((f for f in fams if model_type and model_type in f.model_types), None)
        or next(f for f in fams if f.fallback)
    )


def is_explicit(family_id: str, architecture: str | None, model_type: str | None) -> bool:
    """True when the file lists the checkpoint's architecture or model_type under this family, i.e. the layout is
    known rather than assumed by the fallback family."""
    return any(f.id == family_id and f.lists(architecture, model_type) for f in families())
