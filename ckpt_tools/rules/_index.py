"""What several integrity rules read of the index, computed once per analysis."""

from __future__ import annotations

from ..model.checkpoint import Checkpoint
from ._memo import once_per


@once_per
def indexed_files(ckpt: Checkpoint) -> frozenset[str]:
    """The shard files the index's `weight_map` names (empty without an index): one pass over its values, shared by
    index-missing-shard, index-tensor-mismatch, index-total-size and stray-shard."""
    index = ckpt.index
    return frozenset(index.weight_map.values()) if index is not None else frozenset()
