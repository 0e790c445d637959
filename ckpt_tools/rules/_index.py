"""What several integrity rules read of the index, computed once per analysis."""

from __future__ import annotations

from ..model.checkpoint import Checkpoint


def indexed_files(ckpt: Checkpoint) -> frozenset[str]:
    """The shard files the index's `weight_map` names (empty without an index): `Checkpoint.indexed_files`, one pass
    over its values per analysis, shared by index-missing-shard, index-tensor-mismatch, index-total-size and
    stray-shard."""
    return ckpt.indexed_files
