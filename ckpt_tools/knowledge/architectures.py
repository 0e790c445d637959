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

    def misnesting(self, name: str) -> tuple[str, str] | None:
        """(old prefix, new prefix) for a module or tensor name nested under a root its component does not belong
        to: a component marker (`visual`, `language_model`, ...) directly below another component's root belongs at
        its own component's canonical root (`model.language_model.visual.` -> `model.visual.`); None when the name is
        where its layout puts it, or the family has no root for that component. misnested-prefix (CK201) reports
        these names; the detection and the load model judge them where they belong."""
        hit = self.root_of(name + ".")
        if hit is None:
            return None
        root, prefix = hit
        first = name[len(prefix) :].split(".", 1)[0]
        if root.children is None or first in root.children:
            return None
        comp = _component_of_marker().get(first)
        if comp is None:
            return None
        new = prefix if comp == root.component else self.canonical_root(comp)
        return None if new is None else (prefix + first + ".", new)

    def belongs_at(self, name: str) -> str | None:
        """Where a misnested name belongs (`misnesting`): `model.visual.blocks.0` for
        `model.language_model.visual.blocks.0`; None when it is where it belongs."""
        moved = self.misnesting(name)
        return None if moved is None else moved[1] + name[len(moved[0]) :]

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
def _component_of_marker() -> Mapping[str, str]:
    return {seg: comp for comp, segs in markers().items() for seg in segs}


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
