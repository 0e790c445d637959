"""The checkpoint a repair leaves, built in memory from the plan and its compiled steps: no file is read again.

Header-only repairs leave every weight byte where it was, so the after-state is the before-state with tensors
renamed or dropped (drops pack the kept tensors in their old order, as `steps` writes them), the index `weight_map` a
step writes, and the value data the scan read carried over under the new names. Judging it with the same rules as
`ckpt doctor` gives the repair's predicted verdict (what a dry run prints, what a repair refuses on) and, for
renames and drops, the after-check itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import orjson

from ..model.checkpoint import Checkpoint, with_value_data
from ..model.tensors import Index, Shard
from .edits import BytePatch, Plan
from .steps import IndexStep, RewriteStep, Step


def after_checkpoint(ckpt: Checkpoint, plan: Plan, steps: tuple[Step, ...]) -> Checkpoint:
    """`ckpt` as it will be once `steps` (compiled from `plan`) are applied."""
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
        data = orjson.loads(index_step.new)  # as the loader reads it back (`read.configs.read_index`)
        metadata = data.get("metadata")
        index = Index(
            index.name,
            MappingProxyType(data.get("weight_map") or {}),
            MappingProxyType(metadata if isinstance(metadata, dict) else {}),
        )
    problems = tuple(
        dataclasses.replace(p, tensor=renames.get(p.tensor, p.tensor)) if p.tensor else p
        for p in ckpt.problems
        if p.tensor not in drops
    )
    carried = carry_values(ckpt, renames, drops, patches)
    return dataclasses.replace(
        ckpt, shards=tuple(shards), files=MappingProxyType(files), index=index, problems=problems, **carried
    )


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
    and the derived views `after` computed meanwhile. The scan adds value statistics and changes no other field, and
    `after_checkpoint` takes the value data from `carry_values` of its input alone."""
    renames, drops, patches = edit_maps(scanned, plan)
    return with_value_data(after, **carry_values(scanned, renames, drops, patches))


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
