from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import chain, compress, groupby, islice, repeat
from operator import is_not, itemgetter, ne

from ..model.checkpoint import Checkpoint
from ..model.tensors import Index
from ._index import indexed_files
from .base import Context, Finding, Rule, register

_NAME = itemgetter(0)  # TensorInfo.name, read as a tuple item (cheaper than the attribute, in C)
_KEY, _VALUE = itemgetter(0), itemgetter(1)  # of an index item (name, shard)


def _all_where_indexed(ckpt: Checkpoint) -> bool:
    """Every loaded tensor is in the index, mapped to its own shard: decided in C, a lookup per tensor (or, when the
    index lists each shard's names in a few runs, `_by_runs`)."""
    assert ckpt.index is not None
    weight_map = ckpt.index.weight_map
    # Counted first over the map itself (no list, no position objects): an index of many runs allocates nothing.
    runs = 1 + sum(map(ne, weight_map.values(), islice(weight_map.values(), 1, None)))
    if runs <= len(weight_map) * _RUNS_AT_MOST:
        return _by_runs(ckpt)
    where = weight_map.get
    return all(set(map(where, map(_NAME, shard.tensors))) <= {shard.name} for shard in ckpt.loaded_shards)


_RUNS_AT_MOST = 1 / 16  # runs per index entry beyond which a lookup per tensor is the cheaper proof


def _by_runs(ckpt: Checkpoint) -> bool:
    """`_all_where_indexed` from the index's runs of one shard (an index written shard by shard has one run per
    shard; the caller takes it when there are few): the names of each run are looked up, in C, in a set of its
    shard's tensor names (small, where a lookup per tensor in the whole index misses the cache every time: s163
    0.05 instead of 0.1 s), and a shard is done when all its names were found. WHY it is exact: an index name is a
    key once, so it is in exactly one run, that of the shard it maps to; a shard's names are all mapped to it exactly
    when its runs hold all of them. Only the set of the shard being counted is kept (memory does not grow)."""
    assert ckpt.index is not None
    loaded = {shard.name: shard for shard in ckpt.loaded_shards}
    found = dict.fromkeys(loaded, 0)
    counting: dict[str, set[str]] = {}  # a shard's tensor names, while its runs are being counted
    for name, run in groupby(ckpt.index.weight_map.items(), key=_VALUE):
        shard = loaded.get(name)
        if shard is None or found[name] == len(shard.tensors):
            continue  # a shard that does not load, or one whose names were all found: no loaded tensor here
        names = counting.get(name)
        if names is None:
            names = counting[name] = set(map(_NAME, shard.tensors))
        found[name] += sum(map(names.__contains__, map(_KEY, run)))
        if found[name] == len(shard.tensors):
            del counting[name]
    return all(found[name] == len(shard.tensors) for name, shard in loaded.items())


def _same_order(ckpt: Checkpoint) -> bool:
    """The index lists the loaded tensors in their own order (shard by shard, header order), each with its shard:
    two list comparisons, which read both sides in sequence instead of a hash lookup per tensor. Only with no name
    in two loaded shards (the caller's check), when `ckpt.tensors` is the shards' tensors one after another; an
    index in any other order (e.g. sorted by name) is left to `_all_where_indexed`."""
    assert ckpt.index is not None
    weight_map = ckpt.index.weight_map
    tensors = ckpt.tensors
    # The first names first: an index sorted by name and shards in the writer's order differ there already.
    if next(iter(weight_map), None) != next(iter(tensors), None) or list(weight_map) != list(tensors):
        return False
    shards = ckpt.loaded_shards
    return list(weight_map.values()) == list(chain.from_iterable(repeat(s.name, len(s.tensors)) for s in shards))


_WHERE_INDEXED = "_ck103_where_indexed"  # a checkpoint's `__dict__` key: `where_indexed`'s answer, once computed


def where_indexed(ckpt: Checkpoint) -> bool:
    """Every loaded tensor is in the index, mapped to its own shard; only asked with no name in two loaded shards
    (`_same_order`'s condition). Answered once per checkpoint, kept beside its cached views, or carried over to a
    repair's after-state (`carry_where_indexed`)."""
    known = vars(ckpt).get(_WHERE_INDEXED)
    if known is None:
        known = ckpt.__dict__[_WHERE_INDEXED] = _same_order(ckpt) or _all_where_indexed(ckpt)
    return known


def known_where_indexed(ckpt: Checkpoint) -> bool:
    """`where_indexed(ckpt)` is known (computed or carried) and True; never computes it."""
    return vars(ckpt).get(_WHERE_INDEXED) is True


def carry_where_indexed(
    before: Checkpoint,
    after: Checkpoint,
    renames: Mapping[str, str],
    index_renames: Mapping[str, str],
    index: Index | None,
) -> bool:
    """Give `after`, the checkpoint a header-only rename leaves, `where_indexed`'s answer from `before`'s, when it is
    True and provably stays True; returns whether it did (else `after` computes its own when asked). `renames`: old
    -> new tensor name over the edited shards (nothing dropped); `index_renames`: old -> new index key; `index`:
    `before`'s index when `after`'s weight map is exactly it with its keys through `index_renames` (the index step's
    `renamed_from`), else None.

    WHY this is exact: every loaded tensor of `before`, t in shard s, has weight_map[t] == s. `after`'s map has the
    same values (only keys are renamed), so the same shards load. Checked here: `after`'s loaded shards are `before`'s
    in order, each the same object or one of the same name and tensor count whose every tensor is the same object as
    `before`'s at its place or that tensor renamed by `renames` and otherwise equal; and every loaded name `renames`
    or `index_renames` moves is moved to the same new name by both (identity where one has no entry). So each loaded
    tensor of `after` is R(t) in shard s, and `after`'s map gives R(t) = IR(t) the value `before`'s gave t: s. A
    rename that moves a tensor and not its index key (or the other way), a tensor moved to another shard, or an index
    that changed on disk since the analysis, is not carried. Costs a pointer comparison per tensor of the renamed
    shards (no name hashed) and a look-up per renamed name."""
    if vars(before).get(_WHERE_INDEXED) is not True or index is None or index is not before.index:
        return False
    if _WHERE_INDEXED in vars(after) or before.duplicate_tensors or after.duplicate_tensors:
        return False
    olds, news = before.loaded_shards, after.loaded_shards
    if len(olds) != len(news):
        return False
    for a, b in zip(olds, news, strict=True):
        if a is b:
            continue
        if a.name != b.name or len(a.tensors) != len(b.tensors):
            return False
        for was, now in compress(zip(a.tensors, b.tensors, strict=True), map(is_not, a.tensors, b.tensors)):
            if renames.get(was.name) != now.name or now != was._replace(name=now.name):
                return False
    tensors = before.tensors
    for name in chain(renames, index_renames):
        if name in tensors and renames.get(name, name) != index_renames.get(name, name):
            return False
    after.__dict__[_WHERE_INDEXED] = True
    return True


@register
class IndexTensorMismatch(Rule):
    """Index and shard headers disagree about which tensor lives where.

    What it catches
    Tensors the index maps to a shard whose header lacks them; tensors present in an indexed shard but absent from
    the index (loaders that follow the index never see them); tensors the index maps to one shard that actually live
    in another (docs/reference/failures.md #3). Shards the index does not name are stray-shard (CK107); tensors in
    two loaded shards are duplicate-tensor (CK108).

    Why it matters
    Stale indexes cause missing-parameter errors that name tensors rather than the cause, or silently unloaded
    weights: quantized models get no "weights not initialized" check in vLLM, so an unlisted scale stays garbage.

    Anti-pattern
    Re-quantizing or re-sharding into an existing folder and keeping the old `model.safetensors.index.json`, or
    editing shard headers by hand without updating the index.

    Fix
    Regenerate the index from the shard headers (every tensor exactly once, pointing at the shard that holds it).
    """

    code = "CK103"
    slug = "index-tensor-mismatch"
    severity = "error"
    title = "Index and shard headers disagree"

    def check(self, ctx: Context) -> Iterable[Finding]:
        ckpt = ctx.ckpt
        index = ckpt.index
        if index is None:
            return
        readable = {s.name for s in ckpt.shards}
        # Shards we could not read say nothing about their contents; other rules report them.
        unreadable = {n for n in ckpt.shard_files if n not in readable} | indexed_files(ckpt).difference(ckpt.files)
        # `ckpt.tensors` covers the shards the index names (what vLLM loads); a stray shard and its tensors are
        # stray-shard's (CK107), and a tensor in two loaded shards is duplicate-tensor's (CK108): nothing twice.
        tensors, dupes = ckpt.tensors, ckpt.duplicate_tensors
        if (
            not unreadable
            and not dupes
            and not ckpt.stray_shards
            and len(tensors) == len(index.weight_map)
            and where_indexed(ckpt)
        ):
            # Every loaded tensor is where the index says and the counts match, so the index names nothing else.
            return
        in_stray = {t.name for shard in ckpt.stray_shards for t in shard.tensors}
        absent, misplaced = [], []
        for tensor, shard in index.weight_map.items():
            if shard in unreadable:
                continue
            info = tensors.get(tensor)
            if info is None:
                if tensor not in in_stray:
                    absent.append(tensor)
            elif info.shard != shard and shard not in dupes.get(tensor, ()):
                misplaced.append(tensor)
        unlisted = sorted(tensors.keys() - index.weight_map.keys())
        parts = []
        if absent:
            parts.append(f"{len(absent)} tensor(s) listed in the index are in no shard")
        if misplaced:
            parts.append(f"{len(misplaced)} tensor(s) are mapped to the wrong shard")
        if unlisted:
            parts.append(f"{len(unlisted)} tensor(s) in shards are missing from the index (loaders skip them)")
        if not parts:
            return
        involved = sorted(set(absent) | set(misplaced) | set(unlisted))
        files = {index.name}
        for t in involved:
            files.update(dupes.get(t) or ([tensors[t].shard] if t in tensors else []))
            if t in index.weight_map and index.weight_map[t] in ckpt.files:
                files.add(index.weight_map[t])
        yield self.finding(
            "; ".join(parts) + ". Regenerate model.safetensors.index.json from the shard headers.",
            files=files,
            tensors=involved,
            details={
                "absent": sorted(absent)[:100],
                "misplaced": sorted(misplaced)[:100],
                "unlisted": sorted(unlisted)[:100],
            },
        )
