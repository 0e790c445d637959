from __future__ import annotations

from collections.abc import Iterable

from ._index import indexed_files
from .base import Context, Finding, Rule, register


@register
class IndexMissingShard(Rule):
    """The index names a shard file that does not exist.

    What it catches
    A file named in `model.safetensors.index.json` `weight_map` that is not in the checkpoint folder (or repo).

    Why it matters
    Loaders that trust the index fail with `FileNotFoundError`; worse, some load what is there and serve the missing
    layers with uninitialised memory (SGLang before sgl-project/sglang#32279). vLLM does not check this for you.

    Anti-pattern
    An interrupted download or upload, or an index left over from an earlier sharding.

    Fix
    Download or upload the missing shard(s), or regenerate the index from the shards that exist.
    """

    code = "CK102"
    slug = "index-missing-shard"
    severity = "error"
    title = "Index names a missing shard"

    def check(self, ctx: Context) -> Iterable[Finding]:
        index = ctx.ckpt.index
        if index is None:
            return
        missing: dict[str, list[str]] = {}
        if all(shard in ctx.ckpt.files for shard in indexed_files(ctx.ckpt)):
            return
        for tensor, shard in index.weight_map.items():
            if shard not in ctx.ckpt.files:
                missing.setdefault(shard, []).append(tensor)
        if not missing:
            return
        names = sorted(missing)
        tensors = sorted(t for ts in missing.values() for t in ts)
        yield self.finding(
            f"The index names {len(names)} shard file(s) that do not exist ({', '.join(names[:5])}"
            f"{', ...' if len(names) > 5 else ''}); {len(tensors)} tensor(s) cannot be loaded. Download the missing "
            f"file(s) or regenerate the index.",
            files=[index.name],
            tensors=tensors,
            details={"missing_shards": names},
        )
