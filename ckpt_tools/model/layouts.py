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
    tensors and one over the modules."""
    buckets = tensor_buckets(tensors)
    modules: dict[str, Module] = {}
    ids: dict[Layout, int] = {}
    of: dict[str, int] = {}
    members: list[list[str]] = []
    layers: dict[str, dict[int, dict[str, Module]]] = {}
    for name, ts in buckets.items():
        where = expert_of(name)
        module = modules[name] = Module(name, MappingProxyType(ts), where)
        layout = tuple([(s, t[1], t[2]) for s, t in ts.items()])  # (suffix, dtype, shape)
        lid = ids.get(layout)
        if lid is None:
            lid = ids[layout] = len(members)
            members.append([name])
        else:
            members[lid].append(name)
        of[name] = lid
        if where is not None:
            layer, expert, proj = where
            layers.setdefault(layer, {}).setdefault(expert, {})[proj] = module
    experts = {
        layer: ExpertGroup(MappingProxyType({e: MappingProxyType(p) for e, p in ex.items()}))
        for layer, ex in layers.items()
    }
    return modules, Layouts(MappingProxyType(of), tuple(ids), tuple(map(tuple, members))), experts
