from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from ..knowledge.layouts import alternate_weights
from ._index import indexed_files
from .base import Context, Finding, Rule, register


def stray_files(ctx: Context) -> list[str]:
    """`.safetensors` files beside an index that does not name them (alternate-format weights excepted)."""
    index = ctx.ckpt.index
    if index is None:
        return []
    named = indexed_files(ctx.ckpt)
    skip = [a.pattern for a in alternate_weights()]
    return [f for f in ctx.ckpt.shard_files if f not in named and not any(fnmatch.fnmatch(f, p) for p in skip)]


@register
class StrayShard(Rule):
    """A `.safetensors` file sits beside the index, which does not name it.

    What it catches
    Shards in the checkpoint folder that `model.safetensors.index.json` does not reference (docs/reference/failures.md
    class 3): leftovers of an earlier sharding, a `model.safetensors` next to a sharded export, or a shard added
    without updating the index. Error when the stray file holds tensors no indexed shard has; warning when it only
    duplicates indexed tensors or cannot be read. Files that are known alternate formats (Mistral's
    `consolidated.safetensors`, rules/layouts.toml) are not stray.

    Why it matters
    vLLM reads only the files the index names (`filter_duplicate_safetensors_files`): tensors that exist only in a
    stray shard are never loaded, and for quantized models nothing reports the missing parameters (docs/reference/vllm-0.33.md
    5.1). Tools that glob `*.safetensors` instead load both copies and keep whichever comes last.

    Anti-pattern
    Re-sharding or re-quantizing into a folder that still holds the previous export; uploading with
    `upload_folder` over an older revision without deleting old shards.

    Fix
    Delete leftover shards, or, if the stray shard holds needed tensors, regenerate the index so it names them.
    """

    code = "CK107"
    slug = "stray-shard"
    severity = "error"
    title = "Shard not named by the index"

    def check(self, ctx: Context) -> Iterable[Finding]:
        strays = stray_files(ctx)
        if not strays:
            return
        by_name = {s.name: s for s in ctx.ckpt.shards}
        loaded = ctx.ckpt.tensors
        unique: list[str] = []
        entries = []
        for name in strays:
            shard = by_name.get(name)
            names = [t.name for t in shard.tensors] if shard else []
            only_here = [n for n in names if n not in loaded]
            unique.extend(only_here)
            entries.append(
                {"file": name, "tensors": len(names), "only_here": len(only_here), "readable": shard is not None}
            )
        listed = ", ".join(strays[:5]) + (", ..." if len(strays) > 5 else "")
        files = [*strays, ctx.ckpt.index.name] if ctx.ckpt.index else strays
        if unique:
            yield self.finding(
                f"{len(strays)} shard file(s) are not named by the index ({listed}) and hold {len(unique)} tensor(s) "
                f"that no indexed shard has: vLLM reads only indexed files, so these tensors are never loaded. "
                f"Regenerate the index to include them, or delete the file if they are leftovers.",
                tensors=sorted(unique),
                files=files,
                details={"stray": entries},
            )
        else:
            yield self.finding(
                f"{len(strays)} shard file(s) are not named by the index ({listed}); vLLM ignores them, but every "
                f"download pays for them and tools that glob *.safetensors load their stale copies. Delete them.",
                files=files,
                count=len(strays),
                severity="warning",
                details={"stray": entries},
            )
