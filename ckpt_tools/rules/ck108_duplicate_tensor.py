from __future__ import annotations

from collections.abc import Iterable

from .base import Context, Finding, Rule, register


@register
class DuplicateTensor(Rule):
    """A tensor name is stored in more than one of the shards that get loaded.

    What it catches
    Tensor names present in two or more loaded shards (the files the index names, or every shard when there is no
    index), with whether the copies even agree on dtype and shape (docs/reference/failures.md #3). A name repeated
    inside one file is invalid-header (CK104); copies in a shard the index does not name are stray-shard (CK107).

    Why it matters
    vLLM iterates every loaded file and copies each tensor into its parameter, so the copy in the later file
    silently wins; if the copies differ (a stale layer from an earlier export), the model serves the wrong weights
    without an error. Copies with different shapes fail the load.

    Anti-pattern
    Merging shards from two exports, or re-quantizing some layers into a new shard without removing them from the
    old one.

    Fix
    Keep exactly one copy of each tensor (rewrite the shard that holds the stale copy) and regenerate the index.
    """

    code = "CK108"
    slug = "duplicate-tensor"
    severity = "error"
    title = "Tensor stored in more than one shard"

    def check(self, ctx: Context) -> Iterable[Finding]:
        dups = ctx.ckpt.duplicate_tensors
        if not dups:
            return
        by_shard = {s.name: {t.name: t for t in s.tensors} for s in ctx.ckpt.loaded_shards}
        conflicting = sorted(
            n for n, shards in dups.items() if len({(by_shard[s][n].dtype, by_shard[s][n].shape) for s in shards}) > 1
        )
        names = sorted(dups)
        files = {s for shards in dups.values() for s in shards}
        detail = (
            f"; {len(conflicting)} of them differ in dtype or shape between copies (e.g. `{conflicting[0]}`)"
            if conflicting
            else ""
        )
        yield self.finding(
            f"{len(names)} tensor(s) are stored in more than one loaded shard (e.g. `{names[0]}` in "
            f"{', '.join(dups[names[0]])}){detail}; vLLM loads every copy and the last file wins. Keep one copy and "
            f"regenerate the index.",
            tensors=names,
            files=files,
            details={"duplicates": {n: list(dups[n]) for n in names[:200]}, "conflicting": conflicting[:200]},
        )
