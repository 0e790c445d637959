"""The checkpoint a repair leaves, built in memory from the plan and its compiled steps: no file is read again.

Header-only repairs leave every weight byte where it was, so the after-state is the before-state with tensors
renamed or dropped (drops pack the kept tensors in their old order, as `steps` writes them), the index `weight_map` a
step writes, and the value data the scan read carried over under the new names. Judging it with the same rules as
`ckpt doctor` gives the repair's predicted verdict (what a dry run prints, what a repair refuses on) and, for
renames and drops, the after-check itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping
from types import MappingProxyType
from typing import Any

import orjson

from ..detect.resolve import Detection, carry_detection
from ..model.checkpoint import Checkpoint, carry_grouping, carry_tensor_index
from ..model.tensors import Index, Shard
from ..pipeline import _with_views
from ..rules.ck103_index_tensor_mismatch import carry_where_indexed
from .edits import BytePatch, Plan
from .steps import IndexStep, RewriteStep, Step


def after_checkpoint(ckpt: Checkpoint, plan: Plan, steps: tuple[Step, ...], det: Detection | None = None) -> Checkpoint:
    """`ckpt` as it will be once `steps` (compiled from `plan`) are applied. `det`, `ckpt`'s detection, is offered
    to the after-state's (`detect.resolve.carry_detection`: the modules no step changed keep their rows)."""
    renames, drops, patches = edit_maps(ckpt, plan)
    shards = []
    files = dict(ckpt.files)
    rewritten = {s.file: s for s in steps if isinstance(s, RewriteStep)}
    for shard in ckpt.shards:
        edit = plan.edits.get(shard.name)
        if edit is None or edit.empty:
            shards.append(shard)
            continue
        shards.append(_edited_shard(shard, edit.renames, edit.drops, rewritten.get(shard.name)))
        if shard.name in rewritten:
            files[shard.name] = rewritten[shard.name].new_size
    index = ckpt.index
    index_step = next((s for s in steps if isinstance(s, IndexStep)), None)
    if index_step is not None and index is not None:
        files[index.name] = len(index_step.new)
        if index_step.parsed is not None:  # what compiling the step parsed it into (no second parse of a big index)
            weight_map, metadata = index_step.parsed
        else:  # a step decoded from a journal
            data = orjson.loads(index_step.new)
            weight_map, metadata = data.get("weight_map") or {}, data.get("metadata")
        # The step's parsed map is its own, made for it and never changed: read-only views of it, not a copy of
        # every entry.
        index = Index(
            index.name,
            MappingProxyType(weight_map if type(weight_map) is dict else dict(weight_map)),
            MappingProxyType(dict(metadata) if isinstance(metadata, dict) else {}),
        )
    problems = tuple(
        dataclasses.replace(p, tensor=renames.get(p.tensor, p.tensor)) if p.tensor else p
        for p in ckpt.problems
        if p.tensor not in drops
    )
    carried = carry_values(ckpt, renames, drops, patches)
    after = dataclasses.replace(
        ckpt, shards=tuple(shards), files=MappingProxyType(files), index=index, problems=problems, **carried
    )
    if renames and not drops:
        carry_tensor_index(ckpt, after)  # the tensor map, entered again from the first renamed shard on
        carry_grouping(ckpt, after)  # the modules no rename touches, as the before-state grouped them
        # index-tensor-mismatch's proof that every tensor is where the index says, when the rename keeps it true
        renamed_from = index_step.renamed_from if index_step is not None else None
        carry_where_indexed(ckpt, after, renames, plan.index_renames, renamed_from)
    if index_step is not None and index_step.renamed_from is ckpt.index and "indexed_files" in vars(ckpt):
        # WHY the same files: the new weight map is the analysed one with keys renamed, each beside its old file.
        after.__dict__["indexed_files"] = ckpt.indexed_files  # a cached view, as computed
    if det is not None:
        carry_detection(after, det)
    return after


def edit_maps(ckpt: Checkpoint, plan: Plan) -> tuple[dict[str, str], frozenset[str], dict[str, list[BytePatch]]]:
    """(old name -> new name, dropped names, tensor -> its byte patches) over the shards `plan` edits."""
    renames: dict[str, str] = {}
    drops: set[str] = set()
    patches: dict[str, list[BytePatch]] = {}
    for shard in ckpt.shards:
        edit = plan.edits.get(shard.name)
        if edit is None or edit.empty:
            continue
        renames.update(edit.renames)
        drops |= edit.drops
        for p in edit.patches:
            patches.setdefault(p.tensor, []).append(p)
    return renames, frozenset(drops), patches


def with_scanned_values(after: Checkpoint, scanned: Checkpoint, plan: Plan) -> Checkpoint:
    """`after_checkpoint(scanned, plan, steps)`, given `after`, the same made from the checkpoint `scanned` is before
    its value scan ended (`scanned` with no value statistics yet): `after` with `scanned`'s value data carried over,
    and the derived views `after` computed meanwhile (its tensor map, modules, layouts).

    WHY this is exact: the scan adds value statistics and changes no other field (`pipeline._analyze` makes `scanned`
    by replacing `values` alone), `after_checkpoint` makes every field but the value data from fields the two share,
    and takes the value data from `carry_values` of its input alone; every cached view of a `Checkpoint` is computed
    from its files, shards, index and configs and none reads the value data (`pipeline._with_views`)."""
    renames, drops, patches = edit_maps(scanned, plan)
    return _with_views(dataclasses.replace(after, **carry_values(scanned, renames, drops, patches)), after)


def _edited_shard(
    shard: Shard, renames: Mapping[str, str], drops: frozenset[str], rewrite: RewriteStep | None
) -> Shard:
    kept = [t for t in shard.tensors if t.name not in drops]
    if drops:  # packed in their old order, as steps._shard_steps lays them out
        offset, begins = 0, {}
        for t in sorted(kept, key=lambda t: t.begin):
            begins[t.name] = offset
            offset += t.nbytes
        kept = [t._replace(begin=begins[t.name], end=begins[t.name] + t.nbytes) for t in kept]
    tensors = tuple(t._replace(name=renames.get(t.name, t.name)) if t.name in renames else t for t in kept)
    if rewrite is None:
        return dataclasses.replace(shard, tensors=tensors)
    return dataclasses.replace(shard, tensors=tensors, size=rewrite.new_size, header_len=len(rewrite.new_prefix) - 8)


def carry_values(
    ckpt: Checkpoint,
    renames: Mapping[str, str],
    drops: frozenset[str],
    patches: Mapping[str, list[BytePatch]] | None = None,
) -> dict[str, Any]:
    """The value data of `ckpt` under the repaired names, for every Checkpoint field that holds it, whatever the field
    is called: a value-statistics object that knows how to rename itself (`renamed(old -> new or None)`, the scan's
    `ValueStats`), or a mapping keyed by tensor name (raw bytes). Dropped tensors leave it. Raw bytes of patched
    tensors get the patch; a measurement that is not raw bytes cannot be patched here, so it is left out (the value
    rules then do not judge that tensor until it is read again, which the repair does after writing patches)."""
    names: set[str] | None = None  # every tensor name, built only for a mapping field that may be keyed by them
    patches = patches or {}
    out: dict[str, Any] = {}
    for f in dataclasses.fields(ckpt):
        data = getattr(ckpt, f.name)
        if f.name in ("files", "config", "hf_quant_config", "extra", "index") or not data:
            continue
        if callable(getattr(data, "renamed", None)):
            mapping: dict[str, str | None] = dict.fromkeys(drops)
            mapping.update({old: new for old, new in renames.items() if old not in drops})
            mapping.update(dict.fromkeys(patches))  # statistics cannot be patched in memory
            if isinstance(data, Container) and not any(map(data.__contains__, mapping)):
                # WHY the statistics themselves: `renamed` changes only the names `mapping` holds, so statistics that
                # hold none of them are their own renamed copy (equal field by field); shared, they let the value
                # rules' memos per statistics object (`rules._memo.once_per`) answer the after-state from the pass
                # they made on the before-state.
                out[f.name] = data
                continue
            out[f.name] = data.renamed(mapping)
            continue
        if not isinstance(data, Mapping):
            continue
        if names is None:
            names = ckpt.tensors.keys() | set(ckpt.index.weight_map if ckpt.index else ())
        if not all(isinstance(k, str) and k in names for k in data):
            continue  # not value data keyed by tensor name
        moved: dict[str, Any] = {}
        for name, value in data.items():
            if name in drops:
                continue
            if name in patches:
                if not isinstance(value, (bytes, bytearray)):
                    continue
                value = _patched(bytes(value), patches[name])
            moved[renames.get(name, name)] = value
        out[f.name] = MappingProxyType(moved)
    return out


def _patched(blob: bytes, patches: list[BytePatch]) -> bytes:
    buf = bytearray(blob)
    for p in patches:
        if 0 <= p.position < len(buf):
            buf[p.position] = p.new
    return bytes(buf)
