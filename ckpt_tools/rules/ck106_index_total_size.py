from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter

from ._index import indexed_files
from .base import Context, Finding, Rule, register

_BEGIN, _END = itemgetter(4), itemgetter(5)  # TensorInfo.begin / .end as tuple items (in C, no attribute lookup)


@register
class IndexTotalSize(Rule):
    """The index's `metadata.total_size` does not match the shards it names.

    What it catches
    `model.safetensors.index.json` `metadata.total_size` that equals neither the sum of the tensors' byte spans in
    the shards the index names (what `save_pretrained` writes) nor the sum of those files' sizes. Checked only when
    every named shard was read (docs/reference/failures.md #3).

    Why it matters
    A wrong total is the fingerprint of an index that was not regenerated after tensors were added, dropped or
    re-quantized: the rest of the index is likely stale too. Download tools and memory estimators (hf-mem, the Hub)
    trust the total to size downloads and GPU memory.

    Anti-pattern
    Editing shards (dropping scales, renaming, re-quantizing a few layers) and patching `weight_map` by hand while
    keeping the old metadata.

    Fix
    Regenerate the index from the shard headers, or set `metadata.total_size` to the sum of the tensors' byte spans.
    """

    code = "CK106"
    slug = "index-total-size"
    severity = "warning"
    title = "Index metadata.total_size is wrong"

    def check(self, ctx: Context) -> Iterable[Finding]:
        ckpt = ctx.ckpt
        index = ckpt.index
        if index is None:
            return
        declared = index.metadata.get("total_size")
        if isinstance(declared, bool) or not isinstance(declared, (int, float)):
            return
        named = indexed_files(ckpt)
        shards = ckpt.loaded_shards
        if {s.name for s in shards} != named or not all(s.valid for s in shards):
            return  # missing or broken shards are other rules' findings; the sum would be meaningless
        # sum of (end - begin) over every tensor, summed in C (this runs over every tensor of the checkpoint)
        spans = sum(sum(map(_END, s.tensors)) - sum(map(_BEGIN, s.tensors)) for s in shards)
        files = sum(s.size for s in shards)
        if int(declared) in (spans, files) and declared == int(declared):
            return
        diff = int(declared) - spans
        yield self.finding(
            f"{index.name} says metadata.total_size = {int(declared):,} bytes, but the {len(shards)} shard(s) it names "
            f"hold {spans:,} bytes of tensors ({'+' if diff > 0 else ''}{diff:,}): the index was not regenerated after "
            f"the shards changed. Regenerate it from the shard headers.",
            files=[index.name],
            count=1,
            details={"declared": declared, "tensor_bytes": spans, "file_bytes": files},
        )
