from __future__ import annotations

import math
from collections.abc import Iterable

from ..model.modules import ROLES
from ..model.tensors import TensorInfo
from ..model.values import WIDE_FLOAT_DTYPES, TensorStats
from ._memo import once_per
from ._values import role, unusual
from .base import Context, Finding, Rule, files_of, register

# Scales vLLM divides by or inverts: one value per module (global / input / per-tensor) or per attention layer.
DIVISOR_ROLES = frozenset({"weight_global_scale", "input_scale", "kv_scale"})
# GPTQ / AWQ / AutoRound int `scales` carry the sign of each group's largest-magnitude weight: only non-finite values
# and an all-zero tensor are defects there.
SIGNED_ROLES = frozenset({"signed_weight_scale"})
CHECKED_ROLES = DIVISOR_ROLES | SIGNED_ROLES | {"weight_scale"}
# Block scales no producer writes as zero: transformers' FineGrainedFP8 quantizer gives an all-zero block the scale 1
# (`integrations/finegrained_fp8.py`, `torch.where(max_abs > 0, ...)`), DeepSeek-V3's and Qwen3's FP8 exports do the
# same; vLLM 0.33 multiplies the block by `weight_scale_inv`, so a zero erases all 128 x 128 weights of the block.
NONZERO_SUFFIXES = ("weight_scale_inv",)


def _checked(name: str) -> bool:
    suffix = name.rpartition(".")[2]
    return ROLES.get(suffix) in CHECKED_ROLES and not suffix.endswith(("zero_point", "_bias"))


def _problem(name: str, s: TensorStats) -> str | None:
    found = _value_problem(name, s)
    if found is None and s.count > 1 and s.zero == s.count:
        # vLLM's GPTQ / AWQ / Marlin kernels compute w = s * (q - z): an all-zero scale tensor zeroes the whole layer,
        # and every producer clamps its scales away from zero (AutoGPTQ, AutoAWQ `clamp(min=1e-5)`, AutoRound).
        return f"every value is zero ({s.count} values): the layer's weights all dequantize to 0"
    return found


def _value_problem(name: str, s: TensorStats) -> str | None:
    if s.values is not None:  # small tensors: the values themselves, as they are printed
        bad = [v for v in s.values if not math.isfinite(v)]
        if bad:
            return f"{len(bad)} non-finite value(s) ({bad[0]})"
    elif s.nonfinite:
        return f"{s.nonfinite} non-finite value(s) ({'nan' if s.nan else 'inf'})"
    signed = role(name) in SIGNED_ROLES
    if s.negative and not signed:
        return f"negative value ({s.min:.6g})"
    if s.zero and name.endswith(NONZERO_SUFFIXES) and s.zero < s.count:
        return f"{s.zero} zero block scale(s): those blocks' weights dequantize to 0"
    if s.count == 1 and role(name) in DIVISOR_ROLES and s.zero:
        return "zero"
    return None


@once_per
def problems(ctx: Context) -> dict[str, str]:
    """Tensor -> what is wrong with its values, over every float scale tensor the value scan measured (once per
    analysis: zero-scale-row reads it too, to leave those tensors to this rule)."""
    out: dict[str, str] = {}
    if ctx.ckpt.values is None:
        return out
    tensors = ctx.ckpt.tensors
    measured = ctx.ckpt.values.tensors
    # WHY only the unusual tensors: `_problem` reports only a non-finite value (in `values`, else counted in nan /
    # inf), a negative one, or zeros (a zero block or global scale, an all-zero tensor); a tensor with none of these
    # has no problem, whatever its name, and `unusual` names every tensor with one. Most scanned tensors are clean.
    for name in unusual(ctx.ckpt.values):
        s = measured[name]
        t = tensors.get(name)
        if t is None or not InvalidScaleValue.wants_values(t) or not s.count:
            continue
        found = _problem(name, s)
        if found:
            out[name] = found
    return dict(sorted(out.items()))


@register
class InvalidScaleValue(Rule):
    """Float scale values that are NaN, infinite, negative, or a zero global scale.

    What it catches
    The F32/BF16/F16 scale tensors (global and input scales, per-tensor, per-channel and per-group weight scales,
    KV-cache scales, fine-grained FP8 `weight_scale_inv` block scales, GPTQ / AWQ / AutoRound `scales`), measured by
    the value scan from their byte ranges only: NaN or infinite values anywhere, negative values (scales are
    magnitudes; GPTQ / AWQ `scales` are exempt, as they legitimately carry the sign of each group's largest-magnitude
    weight), a zero global, input or KV scale (docs/reference/failures.md #10, "non-finite or <= 0 in F32 scalars"), a
    zero `weight_scale_inv` block scale, and a weight scale tensor whose every value is zero. 8-bit float block scales
    are nan-fp8-scale's (CK501). Skipped with `--headers-only`.

    Why it matters
    vLLM inverts or divides by these scales when it prepares the kernels (`input_global_scale_inv = 1 / ...`,
    `alpha = input_gs * weight_gs`, vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0
    (docs/reference/vllm-0.33.md §3.1)): a zero becomes inf, NaN spreads through every matmul of the layer, and the
    model answers `!!!!` or NaN logits. Fine-grained FP8 and GPTQ / AWQ kernels multiply each block or group by its
    scale, so a zero scale silently erases those weights. Nothing checks them at load time.

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

    @classmethod
    def wants_values(cls, tensor: TensorInfo) -> bool:
        """F32 / BF16 / F16 global, input, KV and weight scales of any size."""
        return tensor.dtype in WIDE_FLOAT_DTYPES and _checked(tensor.name)

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
