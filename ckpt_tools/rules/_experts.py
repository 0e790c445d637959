"""Per-expert tensor gaps in MoE layers: which experts lack a tensor (`<proj>.<suffix>`) that other experts of the
same layer have, and which expert ids are absent altogether. Shared by moe-expert-missing-scale (CK402), which
reports them, and by nvfp4-weight-only (CK401) and scale-shape-mismatch (CK403), which leave them to CK402 so one
defect is reported once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import attrgetter, methodcaller, not_

from ..knowledge.modules import model_config
from ..model.checkpoint import Checkpoint
from ..model.modules import ExpertGroup
from ._memo import once_per

_NAME, _EXPERTS, _VALUES = attrgetter("name"), attrgetter("experts"), methodcaller("values")


@dataclass(frozen=True)
class LayerGap:
    layer: str  # the `...experts` prefix
    experts: int  # experts present in the checkpoint for this layer
    missing: Mapping[str, tuple[int, ...]]  # "<proj>.<suffix>" -> expert ids lacking it
    absent: tuple[int, ...]  # expert ids with no tensor at all, below the configured expert count

    def missing_names(self) -> list[str]:
        out: list[str] = []
        for key, ids in sorted(self.missing.items()):
            proj, suffix = key.split(".", 1)
            out.extend(f"{self.layer}.{e}.{proj}.{suffix}" for e in ids)
        return out


def _expert_count(ckpt: Checkpoint) -> tuple[str, int] | None:
    """(config key, experts per MoE layer) as the config gives them: the first positive integer of the keys."""
    for key in model_config().expert_count_keys:
        value = ckpt.config_value(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return key, value
    return None


def configured_experts(ckpt: Checkpoint) -> int | None:
    found = _expert_count(ckpt)
    return found[1] if found is not None else None


def implausible_expert_count(ckpt: Checkpoint) -> tuple[str, int] | None:
    """(config key, count) when a MoE checkpoint's configured expert count is past `count_limit` (rules/modules.toml):
    then no expert id below it is enumerated (`num_experts = 10**12` would be a loop without end); CK402 reports it."""
    found = _expert_count(ckpt)
    if found is None or found[1] <= model_config().count_limit or not ckpt.experts:
        return None
    return found


def _experts_touched(names: frozenset[str]) -> set[tuple[str, int]]:
    """(experts prefix, expert id) for every `<prefix>.experts.<id>.` a name starts with: one pass over the names,
    so that asking it for each absent expert of each layer stays linear in the number of names."""
    out: set[tuple[str, int]] = set()
    for n in names:
        at = n.find(".experts.")
        while at != -1:
            rest = n[at + 9 :]
            head, dot, _ = rest.partition(".")
            if dot and head.isdigit() and str(int(head)) == head:
                out.add((n[: at + 8], int(head)))
            at = n.find(".experts.", at + 1)
    return out


def _uniform(ckpt: Checkpoint, group: ExpertGroup) -> bool:
    """Whether every expert of the layer carries the same `<proj>.<suffix>` keys, decided from counts per (projection,
    layout) in C. WHY it is exact: an expert has at most one module per projection and a module's suffixes are its
    layout's, so the number of experts holding `<proj>.<suffix>` is the sum of the counts of the (proj, layout) pairs
    whose layout has that suffix; no expert lacks a key that another has exactly when every such number is the
    number of experts."""
    of, layouts = ckpt.layouts.of, ckpt.layouts.layouts
    banks = group.experts.values()
    pairs = Counter(
        zip(
            chain.from_iterable(banks),
            map(of.__getitem__, map(_NAME, chain.from_iterable(map(_VALUES, banks)))),
            strict=True,
        )
    )
    held: Counter[tuple[str, str]] = Counter()
    for (proj, lid), n in pairs.items():
        for suffix, _dtype, _shape in layouts[lid]:
            held[(proj, suffix)] += n
    experts = len(group.experts)
    return all(n == experts for n in held.values())


def _expert_suffixes(ckpt: Checkpoint) -> frozenset[str] | None:
    """The suffixes of every per-expert module, when they all have the same ones (else None). Decided per layout:
    a module is per-expert only if `.experts.` is in its name, so the layouts whose members' names never contain it
    hold none, and one C-level search of a layout's joined member names tells."""
    found = {
        frozenset(suffix for suffix, _dtype, _shape in layout)
        for layout, names in zip(ckpt.layouts.layouts, ckpt.layouts.members, strict=True)
        if ".experts." in "\n".join(names)
    }
    return next(iter(found)) if len(found) == 1 else None


def _gaps(ckpt: Checkpoint) -> tuple[LayerGap, ...]:
    expected = configured_experts(ckpt) if implausible_expert_count(ckpt) is None else None
    # WHY this is exact: with one suffix set for every expert module, an expert's `<proj>.<suffix>` keys are its
    # projections times that set, so experts with the same projections have the same keys. The projections are
    # compared as sets: the keys are a set, and an expert whose projections load in another order (one split
    # over two shards) has the same ones.
    same_suffixes = _expert_suffixes(ckpt) is not None
    gone: frozenset[str] | None = None  # a pass over the index: only once a layer has a gap
    gone_experts: set[tuple[str, int]] = set()
    out = []
    for layer, group in sorted(ckpt.experts.items()):
        # Ids are non-negative, so below a maximum under `expected` some id is absent exactly when there are fewer.
        ids = group.experts
        short = expected is not None and max(ids) < expected and len(ids) < expected
        if not short and (
            (same_suffixes and len(set(map(frozenset, group.experts.values()))) == 1) or _uniform(ckpt, group)
        ):
            continue  # no expert lacks a tensor another has, and no expert id is absent
        if gone is None:
            gone = ckpt.unavailable_tensors
            gone_experts = _experts_touched(gone) if gone else set()
        have: dict[int, set[str]] = {
            e: {f"{proj}.{suffix}" for proj, module in projs.items() for suffix in module.tensors}
            for e, projs in group.experts.items()
        }
        union = set().union(*have.values())
        missing: dict[str, list[int]] = {}
        for e, keys in sorted(have.items()):
            for key in union - keys:
                missing.setdefault(key, []).append(e)
        absent: tuple[int, ...] = ()
        if expected is not None and max(have) < expected:
            absent = tuple(e for e in range(expected) if e not in have)
        # Tensors held by a missing or broken shard are that shard's finding, not an expert gap.
        if gone:
            missing = {k: [e for e in ids if f"{layer}.{e}.{k}" not in gone] for k, ids in missing.items()}
            missing = {k: ids for k, ids in missing.items() if ids}
            absent = tuple(e for e in absent if (layer, e) not in gone_experts)
        if missing or absent:
            out.append(LayerGap(layer, len(have), {k: tuple(v) for k, v in sorted(missing.items())}, absent))
    return tuple(out)


@once_per
def layer_gaps(ckpt: Checkpoint) -> tuple[LayerGap, ...]:
    """Every MoE layer whose experts do not all carry the same tensors."""
    return _gaps(ckpt)


@once_per
def partially_missing(ckpt: Checkpoint) -> frozenset[str]:
    """`<module>.<suffix>` names that some experts of a layer lack while others have them."""
    return frozenset(n for gap in layer_gaps(ckpt) for n in gap.missing_names())


@once_per
def non_expert_modules(ckpt: Checkpoint) -> tuple[str, ...]:
    """The names of the modules that are not per-expert modules (`Module.expert` is None), in module order: what a
    rule that judges experts once per layer (`Checkpoint.experts`) still has to look at one by one. WHY the C-level
    test is exact: every per-expert module's name contains `.experts.`, so when as many names contain it as there
    are per-expert modules, the names without it are exactly the others."""
    names = tuple(ckpt.modules)
    marked = list(map(str.__contains__, names, repeat(".experts.")))
    experts = sum(map(len, chain.from_iterable(map(_VALUES, map(_EXPERTS, ckpt.experts.values())))))
    if sum(marked) == experts:
        return tuple(compress(names, map(not_, marked)))
    return tuple(name for name, module in ckpt.modules.items() if module.expert is None)


def first_tensor(group: ExpertGroup) -> str:
    """The name of one tensor under the layer's experts prefix."""
    module = next(iter(next(iter(group.experts.values())).values()))
    return next(iter(module.tensors.values())).name
