from __future__ import annotations

import math
from typing import Iterable

from ..model.modules import ROLES
from ._values import values
from .base import Context, Finding, Rule, files_of, register

# Scales vLLM divides by or inverts: one value per module (global / input / per-tensor) or per attention layer.
DIVISOR_ROLES = frozenset({"weight_global_scale", "input_scale", "kv_scale"})
CHECKED_ROLES = DIVISOR_ROLES | {"weight_scale"}


def problems(ctx: Context) -> dict[str, str]:
    """Tensor -> what is wrong with its values, over every float scale tensor whose bytes were read."""
    out: dict[str, str] = {}
    for name in sorted(ctx.ckpt.scale_bytes or {}):
        suffix = name.rsplit(".", 1)[-1]
        role = ROLES.get(suffix)
        if role not in CHECKED_ROLES or suffix.endswith("zero_point") or suffix.endswith("_bias"):
            continue
        vals = values(ctx.ckpt, name)
        if not vals:
            continue
        bad = [v for v in vals if not math.isfinite(v)]
        if bad:
            out[name] = f"{len(bad)} non-finite value(s) ({bad[0]})"
        elif any(v < 0 for v in vals):
            out[name] = f"negative value ({min(vals):.6g})"
        elif len(vals) == 1 and role in DIVISOR_ROLES and vals[0] == 0:
            out[name] = "zero"
    return out


@register
class InvalidScaleValue(Rule):
    """Float scale values that are NaN, infinite, negative, or a zero global scale.

    What it catches
    The small F32/BF16/F16 scale tensors (global and input scales, per-tensor weight scales, KV-cache scales, and
    per-channel weight scales of up to 64 values), read from their byte ranges only: NaN or infinite values anywhere,
    negative values (scales are magnitudes), and a zero global, input or KV scale (docs/reference/failures.md #10,
    "non-finite or <= 0 in F32 scalars"). 8-bit float block scales are nan-fp8-scale's (CK501). Skipped with
    `--headers-only`.

    Why it matters
    vLLM inverts or divides by these scales when it prepares the kernels (`input_global_scale_inv = 1 / ...`,
    `alpha = input_gs * weight_gs`, vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.1)): a zero becomes inf, NaN spreads through every matmul of the
    layer, and the model answers `!!!!` or NaN logits. Nothing checks them at load time.

    Anti-pattern
    Calibration that never saw data for a module (amax 0 gives a zero direct scale or an infinite reciprocal one),
    dividing by an all-zero amax in a conversion script, or a half-written export.

    Fix
    Re-calibrate the affected modules with data that reaches them; never patch a global scale by hand without
    requantizing the weights that were quantized with it.
    """

    code = "CK503"
    slug = "invalid-scale-value"
    severity = "error"
    title = "NaN, infinite, negative or zero scale values"
    needs_values = True

    def check(self, ctx: Context) -> Iterable[Finding]:
        found = problems(ctx)
        if not found:
            return
        names = sorted(found)
        first = names[0]
        yield self.finding(
            f"{len(names)} scale tensor(s) hold invalid values (e.g. `{first}`: {found[first]}); vLLM inverts or "
            f"divides by them and the affected layers produce NaN / `!!!!` output. Re-calibrate those modules.",
            tensors=names,
            files=files_of(ctx.ckpt, names),
            details={"problems": {n: found[n] for n in names[:200]}},
        )
