"""Module layouts: the suffixes, dtypes and shapes of a module's tensors, in header order.

A large checkpoint has tens of thousands of modules but a handful of layouts (every expert projection of a layer
looks alike), and whatever depends only on a module's layout (its disk scheme, whether its scales fit their weight)
is the same for every module that shares it. `group_checkpoint` groups the modules, numbers their layouts and files
the experts in one pass; `Layouts.members` lists the modules of each
layout, so that a rule can judge a layout once and name its modules only when it has something to report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .modules import ExpertGroup, Module, expert_of, tensor_buckets
from .tensors import TensorInfo

Layout = tuple[tuple[str, str, tuple[int, ...]], ...]  # (suffix, dtype, shape) per tensor, in header order


@dataclass(frozen=True)
class Layouts:
    """Module name -> layout id, and the layouts by id. Two modules have the same id exactly when their layouts are
    equal (a different header order of the same tensors is another layout: equal results, computed twice)."""

    of: Mapping[str, int]
    layouts: tuple[Layout, ...]
    members: tuple[tuple[str, ...], ...]  # layout id -> the names of the modules that have it, in module order


def group_checkpoint(tensors: Iterable[TensorInfo]) -> tuple[dict[str, Module], Layouts, dict[str, ExpertGroup]]:
    """Modules, their layouts and the MoE experts (`group_experts`) of tensors in load order, in one pass over the
    tensors and one over the modules (`Module.expert` is filled in on the way, as `group_experts` does).

    The expert modules of one experts prefix come one after another (a writer stores a layer's tensors together,
    sorted by name), so each module's coordinates are read against the previous one's prefix (`_next_expert`), and
    it is filed under that prefix's bank without looking it up again."""
    buckets = tensor_buckets(tensors)
    modules: dict[str, Module] = {}
    ids: dict[Layout, int] = {}
    of: dict[str, int] = {}
    members: list[list[str]] = []
    layers: dict[str, dict[int, dict[str, Module]]] = {}
    layer = head = ""  # the last experts prefix met, and it with its dot ("" before the first)
    bank: dict[int, dict[str, Module]] = {}  # layers[layer]
    numbers = _ExpertIds()
    for name, ts in buckets.items():
        module = modules[name] = Module(name, MappingProxyType(ts))
        layout = tuple([(s, t[1], t[2]) for s, t in ts.items()])  # (suffix, dtype, shape)
        lid = ids.get(layout)
        if lid is None:
            lid = ids[layout] = len(members)
            members.append([name])
        else:
            members[lid].append(name)
        of[name] = lid
        if ".experts." in name:
            where = _next_expert(name, layer, head, numbers) if head and name.startswith(head) else expert_of(name)
            module.__dict__["expert"] = where  # what `Module.expert` computes (and caches there) on first use
            if where is not None:
                if where[0] != layer:
                    layer = where[0]
                    head = layer + "."
                    bank = layers.setdefault(layer, {})
                projs = bank.get(where[1])
                if projs is None:
                    projs = bank[where[1]] = {}
                projs[where[2]] = module
    experts = {
        layer: ExpertGroup(MappingProxyType({e: MappingProxyType(p) for e, p in ex.items()}))
        for layer, ex in layers.items()
    }
    return modules, Layouts(MappingProxyType(of), tuple(ids), tuple(map(tuple, members))), experts


class _ExpertIds(dict[str, int]):
    """An expert id's digits -> `int` of them, converted on first sight: a checkpoint repeats the same few hundred
    ids in every MoE layer, and the lookup costs less than `int` on a string. One per grouping, so it never outlives
    the checkpoint it read."""

    def __missing__(self, digits: str) -> int:
        value = self[digits] = int(digits)
        return value


def _next_expert(name: str, layer: str, head: str, numbers: _ExpertIds) -> tuple[str, int, str] | None:
    """`expert_of(name)` for a name that starts with `head`, which is `layer` (an experts prefix `expert_of` gave)
    and a dot. WHY it is the same: when the rest of the name is digits, a dot and a projection without a dot,
    `expert_of`'s last two dots are the one after `head` and the one after the digits, so it splits the name into
    `layer` (which passed its tests when it was found), the digits and the projection; any other rest is read by
    `expert_of` itself."""
    expert, dot, proj = name[len(head) :].partition(".")
    if dot and proj and "." not in proj and expert.isdecimal():
        return layer, numbers[expert], proj
    return expert_of(name)
