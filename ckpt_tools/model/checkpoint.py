"""The immutable description of one checkpoint: files, shards, tensors, modules, experts and configs.

Built once by `ckpt_tools.read.loader.load_checkpoint`; rules only read it. Config dicts are shared read-only
(never mutated after loading). Derived views (tensor map, modules, experts) are computed on first use and held by
`ckpt_tools.model.views`, outside the checkpoint: a `Checkpoint` is frozen with slots, so nothing writes into it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from .layouts import Layouts, group_checkpoint
from .modules import ExpertGroup, Module
from .tensors import Index, LfsPointer, PendingRepair, Problem, Shard, TensorInfo
from .values import ValueStats
from .views import carry, view

INDEX_NAME = "model.safetensors.index.json"
CONFIG_NAMES = ("config.json", "hf_quant_config.json")  # the model and quantization configs beside the shards


class _HeldWeakly:
    """The slot that lets the derived views (`views`) hold a slotted checkpoint weakly (Python 3.10's dataclasses
    have no `weakref_slot`)."""

    __slots__ = ("__weakref__",)


@dataclass(frozen=True, slots=True)
class Checkpoint(_HeldWeakly):
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
    @property
    def indexed_files(self) -> frozenset[str]:
        """The shard files the index's `weight_map` names (empty without an index)."""
        return _indexed_files(self)

    @property
    def loaded_shards(self) -> tuple[Shard, ...]:
        """The shards a loader reads. With an index, only the files its `weight_map` names: vLLM drops every other
        `.safetensors` file (`filter_duplicate_safetensors_files`), so a stray shard's tensors never load."""
        return _loaded_shards(self)

    @property
    def stray_shards(self) -> tuple[Shard, ...]:
        """Readable shards that an index exists for but does not name (loaders skip them)."""
        loaded = {s.name for s in self.loaded_shards}
        return tuple(s for s in self.shards if s.name not in loaded)

    @property
    def tensors(self) -> Mapping[str, TensorInfo]:
        """Tensor name -> info over the loaded shards. Where a name appears in several, the first in load order
        wins."""
        return _tensor_index(self)[0]

    @property
    def duplicate_tensors(self) -> Mapping[str, tuple[str, ...]]:
        """Tensor names stored in more than one loaded shard -> the shards holding them."""
        return _tensor_index(self)[1]

    @property
    def unavailable_tensors(self) -> frozenset[str]:
        """Tensors the index places in shards that are missing, unreadable or invalid. Rules that judge absences
        treat them as present: their shard's own finding (missing shard, LFS pointer, bad header) is the cause."""
        return _unavailable_tensors(self)

    @property
    def modules(self) -> Mapping[str, Module]:
        return _grouped(self)[0]

    @property
    def layouts(self) -> Layouts:
        """Module name -> layout id (tensor suffixes, dtypes and shapes): what detection and the layout rules compute
        once per layout rather than once per module (`Layouts.members`)."""
        return _grouped(self)[1]

    @property
    def experts(self) -> Mapping[str, ExpertGroup]:
        return _grouped(self)[2]

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


# ---- the derived views, computed once per checkpoint (`views.view`) -------------------------------------------------


@view
def _indexed_files(ckpt: Checkpoint) -> frozenset[str]:
    return frozenset(ckpt.index.weight_map.values()) if ckpt.index is not None else frozenset()


@view
def _loaded_shards(ckpt: Checkpoint) -> tuple[Shard, ...]:
    if ckpt.index is None:
        return ckpt.shards
    named = ckpt.indexed_files
    return tuple(s for s in ckpt.shards if s.name in named)


@view
def _tensor_index(ckpt: Checkpoint) -> tuple[Mapping[str, TensorInfo], Mapping[str, tuple[str, ...]]]:
    shards = ckpt.loaded_shards
    out = {t.name: t for shard in shards for t in shard.tensors}
    if len(out) == sum(len(shard.tensors) for shard in shards):  # no name in two shards (the usual case)
        return MappingProxyType(out), MappingProxyType({})
    out = {}
    dupes: dict[str, list[str]] = {}
    for shard in shards:
        for t in shard.tensors:
            first = out.setdefault(t.name, t)
            if first is not t:
                dupes.setdefault(t.name, [first.shard]).append(shard.name)
    return MappingProxyType(out), MappingProxyType({k: tuple(v) for k, v in dupes.items()})


@view
def _unavailable_tensors(ckpt: Checkpoint) -> frozenset[str]:
    if ckpt.index is None:
        return frozenset()
    good = {s.name for s in ckpt.shards if s.valid}
    if ckpt.indexed_files <= good:  # every indexed shard is readable and valid: no tensor is unavailable
        return frozenset()
    return frozenset(t for t, shard in ckpt.index.weight_map.items() if shard not in good)


@view
def _grouped(ckpt: Checkpoint) -> tuple[Mapping[str, Module], Layouts, Mapping[str, ExpertGroup]]:
    modules, layouts, experts = group_checkpoint(ckpt.tensors.values())
    return MappingProxyType(modules), layouts, MappingProxyType(experts)


_HEADER_VIEWS = (_indexed_files, _loaded_shards, _tensor_index, _unavailable_tensors, _grouped)


def with_value_data(ckpt: Checkpoint, **changes: Any) -> Checkpoint:
    """`replace(ckpt, **changes)` for changes to the value data alone (`values`, or a mapping of tensor name -> raw
    bytes), keeping the derived views `ckpt` has computed: each reads only the shards and the index."""
    if {"shards", "index"} & changes.keys():
        raise ValueError("the derived views read the shards and the index: replace the checkpoint instead")
    out = replace(ckpt, **changes)
    carry(ckpt, out, _HEADER_VIEWS)
    return out
