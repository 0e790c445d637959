"""The load model's accounting and findings for a rule context, made once per detection and shared by the CK60x
rules (each keeps the findings of its own code) and by `ckpt inspect`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._memo import once_per_detection
from .base import Context, Finding, files_of

if TYPE_CHECKING:
    from ..load.accounting import LoadAccounting


# load/ names the catalogue's rules through their classes, so it is imported when first used, not with the rules.
@once_per_detection
def accounting(ctx: Context) -> LoadAccounting:
    from ..load.model import load_accounting

    return load_accounting(ctx.ckpt, ctx.det, every_tensor=False)


@once_per_detection
def load_findings(ctx: Context) -> tuple[Finding, ...]:
    from ..load.findings import findings

    ckpt = ctx.ckpt
    return tuple(findings(accounting(ctx), files=lambda names: files_of(ckpt, names)))


def findings_of(ctx: Context, code: str) -> list[Finding]:
    return [f for f in load_findings(ctx) if f.code == code]
