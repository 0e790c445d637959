"""The immutable description of one checkpoint: files, shards, tensors, modules, experts and configs.

Built once by `ckpt_tools.read.loader.load_checkpoint`; rules only read it. Config dicts are shared read-only
(never mutated after loading). Derived views (tensor map, modules, experts) are computed on first use.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import compress, count, filterfalse, repeat
from operator import attrgetter, is_not, itemgetter
from types import MappingProxyType
from typing import Any, cast

from .layouts import Layout, Layouts, group_checkpoint
from .modules import ExpertGroup, Module, group_experts, tensor_buckets
from .tensors import Index, LfsPointer, PendingRepair, Problem, Shard, TensorInfo
from .values import ValueStats

INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAMES = ("config.json", "hf_quant_config.json")  # the model and quantization configs beside the shards
_NAME = attrgetter("name")
_NAME_ITEM = itemgetter(0)  # TensorInfo.name as a tuple item: the same value, read in C without the attribute lookup


@dataclass(frozen=True)
class Checkpoint:
    target: str
    remote: bool
    files: Mapping[str, int]  # every file at the root -> size in bytes
    shard_files: tuple[str, ...]  # the .safetensors files considered, in load order
    shards: tuple[Shard, ...]  # the shards whose header parsed (valid or not)
    lfs_pointers: tuple[LfsPointer, ...] = ()
    problems: tuple[Problem, ...] = ()
    index: Index | None = None
    config: Mapping[str, Any] | None = None
    hf_quant_config: Mapping[str, Any] | None = None
    values: ValueStats | None = None  # value statistics of the scanned tensors, when the value scan ran
    values_skipped: str | None = None  # why the value scan did not run, if it did not
    pending_repair: PendingRepair | None = None  # an interrupted repair's journal / temporaries (local folders)
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    # ---- tensors -------------------------------------------------------------------------------------------------
    @cached_property
    def indexed_files(self) -> frozenset[str]:
        """The shard files the index's `weight_map` names (empty without an index): one pass over its values, shared
        by the loaded shards, the unavailable tensors and the index rules."""
        return frozenset(self.index.weight_map.values()) if self.index is not None else frozenset()

    @cached_property
    def loaded_shards(self) -> tuple[Shard, ...]:
        """The shards a loader reads. With an index, only the files its `weight_map` names: vLLM drops every other
        `.safetensors` file (`filter_duplicate_safetensors_files`), so a stray shard's tensors never load."""
        if self.index is None:
            return self.shards
        named = self.indexed_files
        return tuple(s for s in self.shards if s.name in named)

    @cached_property
    def stray_shards(self) -> tuple[Shard, ...]:
        """Readable shards that an index exists for but does not name (loaders skip them)."""
        loaded = {s.name for s in self.loaded_shards}
        return tuple(s for s in self.shards if s.name not in loaded)

    @cached_property
    def _tensor_index(self) -> tuple[Mapping[str, TensorInfo], Mapping[str, tuple[str, ...]]]:
        out: dict[str, TensorInfo] = {}
        dupes: dict[str, list[str]] = {}
        # Fast path, in C: names are unique within a shard, so when the sizes add up no name is in two shards.
        for shard in self.loaded_shards:
            out.update(zip(map(_NAME_ITEM, shard.tensors), shard.tensors, strict=True))
        if len(out) == sum(len(shard.tensors) for shard in self.loaded_shards):
            return MappingProxyType(out), MappingProxyType({})
        out = {}
        for shard in self.loaded_shards:
            for t in shard.tensors:
                first = out.setdefault(t.name, t)
                if first is not t:
                    dupes.setdefault(t.name, [first.shard]).append(shard.name)
        return MappingProxyType(out), MappingProxyType({k: tuple(v) for k, v in dupes.items()})

    @property
    def tensors(self) -> Mapping[str, TensorInfo]:
        """Tensor name -> info over the loaded shards. Where a name appears in several, the first in load order
        wins."""
        return self._tensor_index[0]

    @property
    def duplicate_tensors(self) -> Mapping[str, tuple[str, ...]]:
        """Tensor names stored in more than one loaded shard -> the shards holding them."""
        return self._tensor_index[1]

    @cached_property
    def unavailable_tensors(self) -> frozenset[str]:
        """Tensors the index places in shards that are missing, unreadable or invalid. Rules that judge absences
        treat them as present: their shard's own finding (missing shard, LFS pointer, bad header) is the cause."""
        if self.index is None:
            return frozenset()
        good = {s.name for s in self.shards if s.valid}
        if self.indexed_files <= good:  # every indexed shard is readable and valid: no tensor is unavailable
            return frozenset()
        return frozenset(t for t, shard in self.index.weight_map.items() if shard not in good)

    @cached_property
    def _grouped(self) -> tuple[Mapping[str, Module], Layouts, Mapping[str, ExpertGroup]]:
        modules, layouts, experts = group_checkpoint(self.tensors.values())
        return MappingProxyType(modules), layouts, MappingProxyType(experts)

    @cached_property
    def modules(self) -> Mapping[str, Module]:
        return self._grouped[0]

    @cached_property
    def layouts(self) -> Layouts:
        """Module name -> layout id (tensor suffixes, dtypes and shapes): what detection and the layout rules compute
        once per layout rather than once per module (`Layouts.members`)."""
        return self._grouped[1]

    @cached_property
    def experts(self) -> Mapping[str, ExpertGroup]:
        return self._grouped[2]

    @property
    def shard_by_name(self) -> Mapping[str, Shard]:
        return {s.name: s for s in self.shards}

    @property
    def total_bytes(self) -> int:
        return sum(self.files.get(name, 0) for name in self.shard_files)

    # ---- configs -------------------------------------------------------------------------------------------------
    @property
    def text_config(self) -> Mapping[str, Any]:
        cfg = self.config or {}
        text = cfg.get("text_config")
        return text if isinstance(text, dict) else cfg

    @property
    def architecture(self) -> str | None:
        archs = (self.config or {}).get("architectures")
        return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None

    @property
    def model_type(self) -> str | None:
        mt = (self.config or {}).get("model_type")
        return mt if isinstance(mt, str) else None

    def config_value(self, key: str) -> Any:
        """A key from config.json, falling back to its `text_config`."""
        cfg = self.config or {}
        if key in cfg:
            return cfg[key]
        return self.text_config.get(key)


def carry_tensor_index(before: Checkpoint, after: Checkpoint) -> bool:
    """Give `after`, a copy of `before` whose tensors a repair renamed in place (the same loaded shards in the same
    order, each with as many tensors), its tensor map from `before`'s: a copy of it (in C) whose entries from the
    first shard that changed on are entered again from `after`'s shards. Returns False (and sets nothing) when
    `after` is not such a copy or either map has a name in two shards; `after` then builds its own.

    WHY this is exact: without a repeated name the map is every loaded shard's (name, tensor) pairs, shard after
    shard in load order (`_tensor_index`'s fast path); the shards before the first changed one are the same objects
    in the same order, and so are that shard's tensors before its first changed one, so the copy's entries up to
    there are `after`'s, and the rest are entered in `after`'s order after them; a repeated name shows as a shorter
    map, as in `_tensor_index`."""
    if "_tensor_index" not in vars(before) or "_tensor_index" in vars(after) or before.duplicate_tensors:
        return False
    old, new = before.loaded_shards, after.loaded_shards
    if len(old) != len(new) or any(
        a.name != b.name or len(a.tensors) != len(b.tensors) for a, b in zip(old, new, strict=True)
    ):
        return False
    first = next((r for r, (a, b) in enumerate(zip(old, new, strict=True)) if a is not b), len(old))
    out: dict[str, TensorInfo] = before.tensors.copy()  # type: ignore[attr-defined]  # a read-only dict view
    if first < len(old):
        # Within the first changed shard, the entries before its first changed tensor are the same objects too.
        at = next(compress(count(), map(is_not, old[first].tensors, new[first].tensors)), len(old[first].tensors))
        for name in map(_NAME, old[first].tensors[at:]):
            del out[name]
        out.update(zip(map(_NAME, new[first].tensors[at:]), new[first].tensors[at:], strict=True))
    for shard in old[first + 1 :]:
        for name in map(_NAME, shard.tensors):
            del out[name]
    for shard in new[first + 1 :]:
        out.update(zip(map(_NAME, shard.tensors), shard.tensors, strict=True))
    if len(out) != sum(len(shard.tensors) for shard in new):
        return False
    after.__dict__["_tensor_index"] = (MappingProxyType(out), MappingProxyType({}))  # a cached view, as computed
    return True


# A rename that touches more than this share of the tensors regroups everything: carrying modules over would cost as
# much, and the common repair (a misplaced component) renames a few hundred tensors of a hundred thousand.
_CARRY_AT_MOST = 0.25


def carry_grouping(before: Checkpoint, after: Checkpoint) -> bool:
    """Give `after`, a copy of `before` whose tensors a repair renamed in place (same shards, same order, every
    other field of every tensor equal), its modules, layouts and experts from the ones `before` computed, regrouping
    only the modules a renamed tensor leaves or joins. Returns False (and sets nothing) when `after` is not such a
    copy, `before` has not grouped its modules yet, or most tensors were renamed; `after` then groups its own.

    WHY this is exact: `group_checkpoint` puts each tensor in the module of its name's prefix, in load order. A module
    whose prefix no renamed tensor had before or has after holds the same tensor objects in the same order, so its
    `Module` (and the cached views on it) is the same and its layout is the one `before` numbered; the other modules
    hold the after-state's tensors of their prefix, in load order: the unrenamed tensors of the before-state's module
    of that name and the renamed tensors given that prefix. Modules come in the order their first tensor loads (a
    carried module's first tensor keeps its place), and layouts are numbered in module order, exactly as
    `group_checkpoint` does. Expert groups are carried whole only when no regrouped module has `.experts.` in its name
    (then the per-expert modules are the same objects in the same order); otherwise they are filed again from the
    modules (`group_experts`). A test holds the result to `group_checkpoint` on renames that split, merge, empty and
    create modules, move a module's first tensor, change layouts and move or dissolve experts."""
    if "_grouped" not in vars(before) or before.duplicate_tensors or after.duplicate_tensors:
        return False
    n = len(before.tensors)
    if len(after.tensors) != n:
        return False
    # A tensor not renamed is the very same object; a renamed one must differ from its old self by name alone.
    # (load position, old tensor, new tensor) of each changed one: the two maps are the loaded shards' tensors in load
    # order (no name is in two), so where two shards in the same place hold as many tensors, only those that are not
    # the same object need be looked at.
    changed: list[int] = []
    olds: list[TensorInfo] = []
    news: list[TensorInfo] = []
    old_shards, new_shards = before.loaded_shards, after.loaded_shards
    if len(old_shards) == len(new_shards) and all(
        len(a.tensors) == len(b.tensors) for a, b in zip(old_shards, new_shards, strict=True)
    ):
        offset = 0
        for a, b in zip(old_shards, new_shards, strict=True):
            if a is not b:
                here = list(compress(range(len(a.tensors)), map(is_not, a.tensors, b.tensors)))
                changed += [offset + i for i in here]
                olds += map(a.tensors.__getitem__, here)
                news += map(b.tensors.__getitem__, here)
            offset += len(a.tensors)
    else:
        old_infos, new_infos = list(before.tensors.values()), list(after.tensors.values())
        changed = list(compress(range(n), map(is_not, old_infos, new_infos)))
        olds, news = [old_infos[i] for i in changed], [new_infos[i] for i in changed]
    if len(changed) > n * _CARRY_AT_MOST:
        return False
    if any(new != old._replace(name=new.name) for old, new in zip(olds, news, strict=True)):
        return False
    renamed_from = {old.name for old in olds}
    touched = {name.rpartition(".")[0] for name in renamed_from} | {new.name.rpartition(".")[0] for new in news}
    old_modules, old_layouts = before.modules, before.layouts
    moved = _moved_whole(before, olds, news)
    if moved is not None:
        after.__dict__["_grouped"] = moved  # a cached view, set as it would be
        return True
    # Load positions without a map of every tensor: shard by shard (no name is in two loaded shards), a shard's
    # index built only when one of its tensors is asked for exactly.
    shards = after.loaded_shards
    rank = {shard.name: r for r, shard in enumerate(shards)}
    offsets = [0]
    for shard in shards:
        offsets.append(offsets[-1] + len(shard.tensors))
    in_shard: dict[int, dict[str, int]] = {}

    def position(t: TensorInfo) -> int:
        r = rank[t.shard]
        index = in_shard.get(r)
        if index is None:
            names = map(_NAME, shards[r].tensors)
            index = in_shard[r] = dict(zip(names, range(len(shards[r].tensors)), strict=True))
        return offsets[r] + index[t.name]

    # The regrouped modules: their tensors in load order, into buckets by `tensor_buckets`.
    placed = list(zip(changed, news, strict=True))
    for name in touched & old_modules.keys():
        placed += [(position(t), t) for t in old_modules[name].tensors.values() if t.name not in renamed_from]
    placed.sort(key=itemgetter(0))
    buckets = tensor_buckets(map(itemgetter(1), placed))
    load_position = {id(t): i for i, t in placed}
    # regrouped module -> the load position of its first tensor (a bucket keeps its tensors in the order placed)
    starts = {prefix: load_position[id(next(iter(bucket.values())))] for prefix, bucket in buckets.items()}
    regrouped = {name: Module(name, MappingProxyType(bucket)) for name, bucket in buckets.items()}

    # Module order: the carried modules keep theirs; each regrouped one goes where its first tensor loads. The search
    # compares carried modules' first positions with `start`: exactly within its shard, by their shard's first
    # position elsewhere (which orders them the same way against `start`, and keeps the keys in order).
    carried = list(filterfalse(touched.__contains__, old_modules))
    order: list[str] = []
    placed_at: dict[str, int] = {}  # regrouped module -> its index in `order`
    done = 0
    for name, start in sorted(starts.items(), key=itemgetter(1)):
        home = bisect_right(offsets, start) - 1

        def start_of(module: str, home: int = home) -> int:
            first = next(iter(old_modules[module].tensors.values()))
            r = rank[first.shard]
            return position(first) if r == home else offsets[r]

        at = bisect_left(carried, start, lo=done, key=start_of)
        order += carried[done:at]
        placed_at[name] = len(order)
        order.append(name)
        done = at
    order += carried[done:]
    # Every name in `order` is a carried module or a regrouped one, so no value stays None after the update.
    modules = cast("dict[str, Module]", dict(zip(order, map(old_modules.get, order), strict=True)))
    modules.update(regrouped)  # in place: a key already there keeps its position

    # Layouts numbered in module order. A key per layout: `before`'s id, or a new one past them for a layout only a
    # regrouped module has (equal layouts get equal keys).
    key_of = {layout: lid for lid, layout in enumerate(old_layouts.layouts)}
    fresh: dict[Layout, int] = {}
    seq = list(map(old_layouts.of.get, order, repeat(-1)))  # -1: a regrouped module, keyed below
    for name, bucket in buckets.items():
        layout = tuple([(s, t.dtype, t.shape) for s, t in bucket.items()])
        key = key_of.get(layout)
        if key is None:
            key = fresh.setdefault(layout, len(key_of) + len(fresh))
        seq[placed_at[name]] = key
    layout_by_key = (*old_layouts.layouts, *fresh)
    lid_of_key = {key: lid for lid, key in enumerate(dict.fromkeys(seq))}
    lids = list(map(lid_of_key.__getitem__, seq))
    by_lid = sorted(range(len(order)), key=lids.__getitem__)  # stable: module order within a layout
    counts = Counter(lids)
    members: list[tuple[str, ...]] = []
    at = 0
    for lid in range(len(lid_of_key)):
        members.append(tuple(map(order.__getitem__, by_lid[at : at + counts[lid]])))
        at += counts[lid]
    layouts = Layouts(
        MappingProxyType(dict(zip(order, lids, strict=True))),
        tuple(layout_by_key[key] for key in lid_of_key),
        tuple(members),
    )
    if any(".experts." in name for name in touched):
        experts: Mapping[str, ExpertGroup] = MappingProxyType(group_experts(modules))
    else:
        experts = before.experts
    after.__dict__["_grouped"] = (MappingProxyType(modules), layouts, experts)  # a cached view, set as it would be
    return True


def _moved_whole(
    before: Checkpoint, olds: list[TensorInfo], news: list[TensorInfo]
) -> tuple[Mapping[str, Module], Layouts, Mapping[str, ExpertGroup]] | None:
    """`carry_grouping`'s result when the rename moves whole modules to new names (the common repair: a component's
    prefix changes), else None. `olds` / `news`: the renamed tensors, before and after, in load order, each differing
    from its old self by name alone.

    WHY this is exact: here every renamed tensor keeps its suffix, all tensors of its module are renamed, one module
    goes to one new name that no module of `before` has, and no two go to the same. So each moved module's tensors
    become exactly one new module's, at the same load positions and in the same order, under the same suffixes with
    the same dtypes and shapes; every other module is unchanged. `group_checkpoint` then makes the same modules in
    the same order (ordered by where their first tensor loads) with the moved ones renamed, the same layouts (a
    layout is suffixes, dtypes and shapes), hence the same layout ids in the same first-appearance order, and each
    layout's members in module order with the moved names substituted. Expert groups are carried whole when no moved
    name has `.experts.` in it, else filed again from the modules, as `carry_grouping` does."""
    old_modules = before.modules
    to: dict[str, str] = {}  # old module name -> new module name
    counts: dict[str, int] = {}
    for was, now in zip(olds, news, strict=True):
        prefix, _, suffix = was.name.rpartition(".")
        new_prefix, _, new_suffix = now.name.rpartition(".")
        if suffix != new_suffix or to.setdefault(prefix, new_prefix) != new_prefix:
            return None
        counts[prefix] = counts.get(prefix, 0) + 1
    targets = set(to.values())
    if len(targets) != len(to) or not targets.isdisjoint(old_modules):
        return None
    if any(len(old_modules[prefix].tensors) != n for prefix, n in counts.items()):
        return None
    renamed_tensors: dict[str, list[TensorInfo]] = {}
    for was, now in zip(olds, news, strict=True):
        renamed_tensors.setdefault(to[was.name.rpartition(".")[0]], []).append(now)
    layouts = before.layouts
    names = list(old_modules)
    if list(layouts.of) != names:  # the layout map is in module order (as `group_checkpoint` builds it)
        return None
    values = list(old_modules.values())
    at = list(compress(range(len(names)), map(to.__contains__, names)))
    for i in at:
        old = values[i]
        new_name = to[names[i]]
        # The old module's tensors are in load order, as are its renamed ones: suffix by suffix, the same order.
        values[i] = Module(new_name, MappingProxyType(dict(zip(old.tensors, renamed_tensors[new_name], strict=True))))
        names[i] = new_name
    first = at[0] if at else len(names)
    if first >= len(names) // 2:
        # The maps up to the first moved module are the old ones: copied (in C) and entered again from there only.
        modules = old_modules.copy()  # type: ignore[attr-defined]  # a read-only dict view
        of = layouts.of.copy()  # type: ignore[attr-defined]
        for name in list(modules)[first:]:
            del modules[name]
            del of[name]
        modules.update(zip(names[first:], values[first:], strict=True))
        of.update(zip(names[first:], list(layouts.of.values())[first:], strict=True))
    else:
        modules = dict(zip(names, values, strict=True))
        of = dict(zip(names, layouts.of.values(), strict=True))
    hit = {layouts.of[prefix] for prefix in to}
    members = tuple(
        tuple(map(to.get, names_of, names_of)) if lid in hit else names_of
        for lid, names_of in enumerate(layouts.members)
    )
    if any(".experts." in name for name in (*to, *targets)):
        experts: Mapping[str, ExpertGroup] = MappingProxyType(group_experts(modules))
    else:
        experts = before.experts
    return MappingProxyType(modules), Layouts(MappingProxyType(of), layouts.layouts, members), experts
