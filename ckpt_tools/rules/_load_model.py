"""The load model's accounting and findings for a rule context, made once per detection and shared by the CK60x
rules (each keeps the findings of its own code) and by `ckpt inspect`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._memo import once_per_detection
from .base import Context, Finding, files_of

if TYPE_CHECKING:
    from ..load.accounting import LoadAccounting


# The load model and vLLM's dry run are imported when a CK60x rule first runs, not with the rule catalogue.
@once_per_detection
def accounting(ctx: Context) -> LoadAccounting:
    """The load model's accounting (its problems only); under `--vllm`, vLLM's own, with the owners of the model's
    whole accounting carried over (vllm_dry/combine.py)."""
    from ..load.model import load_accounting

    if ctx.vllm is None:
        return load_accounting(ctx.ckpt, ctx.det, every_tensor=False)
    from ..vllm_dry.combine import combined
    from .ck201_misnested_prefix import rename_plan

    # The whole accounting: combine reads which parameters the model fills, not only its problems.
    model = load_accounting(ctx.ckpt, ctx.det)
    moved = {n: new + n[len(old) :] for (old, new), names in rename_plan(ctx).items() for n in names}
    return combined(model, ctx.vllm.result().accounting, ctx.ckpt.unavailable_tensors, moved)


@once_per_detection
def load_findings(ctx: Context) -> tuple[Finding, ...]:
    from ._load_findings import findings

    ckpt = ctx.ckpt
    return tuple(findings(accounting(ctx), files=lambda names: files_of(ckpt, names)))


def findings_of(ctx: Context, code: str) -> list[Finding]:
    return [f for f in load_findings(ctx) if f.code == code]
