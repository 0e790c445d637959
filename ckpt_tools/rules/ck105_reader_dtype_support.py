from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ..knowledge.dtypes import dtype_support
from ..model.checkpoint import Checkpoint
from .base import Context, Finding, Rule, files_of, register


def dtype_census(ckpt: Checkpoint) -> Counter[str]:
    """Tensors per dtype. Every tensor is in exactly one module and a module's layout lists its tensors' dtypes, so
    the count is summed over layouts (each weighted by how many modules have it) rather than over tensors."""
    census: Counter[str] = Counter()
    for layout, members in zip(ckpt.layouts.layouts, ckpt.layouts.members, strict=True):
        n = len(members)
        for _suffix, dtype, _shape in layout:
            census[dtype] += n
    return census


@register
class ReaderDtypeSupport(Rule):
    """Tensors in dtypes that older or other readers cannot load (F8_E8M0, F4, FP6, FNUZ).

    What it catches
    A dtype census of every shard, checked against the reader-support table in rules/dtypes.toml: F8_E8M0 (MX and
    DeepSeek-V4 block scales), F4 (packed FP4 with a logical shape), F6_E2M3 / F6_E3M2, and the AMD FNUZ FP8 formats
    (docs/reference/failures.md #20). The finding lists, per dtype, the readers that fail on it or needed a fix,
    with the release or pull request that added support. F8_E4M3 is documented in the table but not reported.

    Why it matters
    vLLM 0.33 reads all of them through safetensors' `safe_open`, but the same checkpoint also meets conversion
    scripts, other runtimes and scanners: `KeyError: 'F8_E8M0'`, "'F4' is not a valid DType", `Dtype not
    understood`, or modelscan flagging every tensor as invalid. F4's logical shape (elements, not bytes) also trips
    tools that assume one byte per element.

    Anti-pattern
    Publishing an F8_E8M0 / F4 checkpoint without saying which reader versions it needs, or post-processing it with
    `safetensors.torch.load(bytes)` (which cannot round-trip these dtypes).

    Fix
    Nothing to change in the checkpoint for vLLM; state the minimum reader versions in the model card, and use
    `safe_open` (safetensors Rust reader) or a tool version from the table for any processing step.
    """

    code = "CK105"
    slug = "reader-dtype-support"
    severity = "info"
    title = "Dtypes that older readers cannot load"

    def check(self, ctx: Context) -> Iterable[Finding]:
        table = dtype_support()
        census = dtype_census(ctx.ckpt)
        reported = sorted(d for d in census if d in table and table[d].report)
        if not reported:
            return
        parts, readers = [], {}
        for dtype in reported:
            entry = table[dtype]
            trouble = [r for r in entry.readers if r.status != "supported"]
            readers[dtype] = [
                {"reader": r.name, "status": r.status, "note": r.note, "source": r.source} for r in entry.readers
            ]
            names = "; ".join(f"{r.name}: {r.note}" for r in trouble) or "no known gaps"
            parts.append(f"{dtype} ({census[dtype]} tensor(s), {entry.what}): {names}")
        tensors = sorted(n for n, t in ctx.ckpt.tensors.items() if t.dtype in reported)
        yield self.finding(
            "vLLM reads these dtypes, other readers may not. " + " | ".join(parts) + ".",
            tensors=tensors,
            files=files_of(ctx.ckpt, tensors),
            details={"dtypes": {d: census[d] for d in reported}, "readers": readers},
        )
