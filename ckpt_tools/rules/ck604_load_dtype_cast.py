from __future__ import annotations

from collections.abc import Iterable

from ._load_model import findings_of
from .base import Context, Finding, Rule, register


@register
class LoadDtypeCast(Rule):
    """A tensor is copied into a parameter of another kind (float into integer, or back) without an error.

    What it catches
    Tensors whose dtype kind differs from the parameter vLLM builds for them (the load model,
    docs/reference/load-model.md): F32 / BF16 scales or weights into a uint8 packed parameter, integer data into a
    floating-point one. Float-to-float copies (F32 norms into a BF16 model) are ordinary and not reported.

    Why it matters
    The weight loaders `copy_` the tensor into the parameter (vllm/model_executor/model_loader/weight_utils.py
    default_weight_loader, vLLM 0.33.0): torch converts across kinds silently, so the layer computes with values
    that mean nothing in its format.

    Anti-pattern
    Writing MX / NVFP4 scales as F32 instead of E8M0 / uint8, or leaving a layer BF16 under a packed-FP4
    declaration.

    Fix
    Store the tensors in the dtype the scheme defines, or declare the layer unquantized.
    """

    code = "CK604"
    slug = "load-dtype-cast"
    severity = "error"
    title = "Tensor cast into a parameter of another kind"

    def check(self, ctx: Context) -> Iterable[Finding]:
        yield from findings_of(ctx, self.code)
