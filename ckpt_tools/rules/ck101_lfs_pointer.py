from __future__ import annotations

from collections.abc import Iterable

from .base import Context, Finding, Rule, register


@register
class LfsPointer(Rule):
    """A `.safetensors` file is a Git LFS pointer (a ~130-byte text file), not the weights.

    What it catches
    A shard whose first bytes are `version https://git-lfs...`: the repository was cloned without git-lfs, or the
    LFS objects were never pulled (docs/reference/failures.md #1).

    Why it matters
    Every reader fails on it with a misleading `HeaderTooLarge` ("header too large"), because the first 8 bytes of
    the text are read as an enormous header length.

    Anti-pattern
    `git clone https://.../org/model` on a machine without `git lfs install`, then `vllm serve ./model`.

    Fix
    Fetch the real objects: `git lfs install && git lfs pull` inside the clone, or download with
    `hf download org/model --local-dir ./model`.
    """

    code = "CK101"
    slug = "lfs-pointer"
    severity = "error"
    title = "Git LFS pointer instead of weights"

    def check(self, ctx: Context) -> Iterable[Finding]:
        pointers = ctx.ckpt.lfs_pointers
        if not pointers:
            return
        sizes = [p.size for p in pointers if p.size]
        total = f" (the real files total {sum(sizes) / 1e9:.2f} GB)" if sizes else ""
        yield self.finding(
            f"{len(pointers)} of {len(ctx.ckpt.shard_files)} .safetensors file(s) are Git LFS pointers, not "
            f"weights{total}; run `git lfs pull` in the clone or download the files with `hf download`.",
            files=[p.name for p in pointers],
            count=len(pointers),
            details={"pointers": [{"file": p.name, "oid": p.oid, "size": p.size} for p in pointers]},
        )
