from __future__ import annotations

from collections.abc import Iterable

from ..model.checkpoint import Checkpoint
from ._index import indexed_files
from .base import Context, Finding, Rule, register


def where_indexed(ckpt: Checkpoint) -> bool:
    """Every loaded tensor is in the index, mapped to its own shard."""
    assert ckpt.index is not None
    weight_map = ckpt.index.weight_map
    return all(weight_map.get(name) == info.shard for name, info in ckpt.tensors.items())


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
