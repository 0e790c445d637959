from __future__ import annotations

from collections.abc import Iterable

from ..model.tensors import TensorInfo
from ..model.values import STATS_DTYPES, TensorStats, channel_layout, value_dtype
from ._values import unusual
from .base import Context, Finding, Rule, files_of, register
from .ck503_invalid_scale_value import problems as invalid_scale_values


def _what(t: TensorInfo, s: TensorStats) -> str:
    layout = channel_layout(t)
    axis = "column" if layout is not None and layout[0] == "columns" else "row"
    return f"{s.zero_rows} of {s.channels} output-channel {axis}s all zero (first: {axis} {s.first_zero_row})"


@register
class ZeroScaleRow(Rule):
    """A weight scale row (one output channel) whose every scale is zero: that channel always outputs 0.

    What it catches
    Weight scale tensors in which every scale of some output channel is zero, measured by the value scan (exact
    over every element, whatever the read boundaries): per-channel FP8 `weight_scale` (out, 1), fine-grained FP8
    `weight_scale_inv` block grids (out / 128, in / 128: a zero row erases 128 channels), NVFP4 and int group
    `weight_scale` (out, in / group, in E4M3 or 16-bit floats), fused expert banks (experts, out, k), and GPTQ / AWQ /
    AutoRound `scales` (groups, out), whose channels are columns. Tensors invalid-scale-value (CK503) already
    reports (every value zero, a zero block scale, NaN) are left to it, so one defect is reported once. MX E8M0
    scales have no zero code. Skipped with `--headers-only`.

    Why it matters
    vLLM's kernels dequantize each weight as scale x code (FP8, NVFP4, MX) or scale x (q - z) (GPTQ / AWQ / Marlin),
    vllm/model_executor/layers/quantization/*.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.1, §2.3): a channel
    whose scales are all zero dequantizes to 0 whatever its packed weights hold, so the layer loses that output
    feature silently. Nothing checks it at load time. Producers give an all-zero block a nonzero scale (ModelOpt,
    transformers' FineGrainedFP8, AutoGPTQ / AutoAWQ / AutoRound clamp scales away from 0), so a zero row means a
    conversion bug, a half-written export or a scale patched by hand.

    Anti-pattern
    Zero-filling the scales of channels a conversion script could not map, dividing by an amax of 0 without a clamp,
    or "scrubbing" bad scales to 0.

    Fix
    Re-export the affected modules with the producer. If the source model's weight rows are zero too (vocabulary
    padding), the output is unchanged: suppress the finding for those tensors in `.ckpt.toml`.
    """

    code = "CK504"
    slug = "zero-scale-row"
    severity = "error"
    title = "Output channels whose scales are all zero"
    needs_values = True

    @classmethod
    def wants_values(cls, tensor: TensorInfo) -> bool:
        """Weight scales with a known output-channel layout, in a dtype that has a zero (not E8M0)."""
        dtype = value_dtype(tensor)
        return dtype in STATS_DTYPES and dtype != "F8_E8M0" and channel_layout(tensor) is not None

    def check(self, ctx: Context) -> Iterable[Finding]:
        if ctx.ckpt.values is None:
            return
        reported = invalid_scale_values(ctx)
        found: dict[str, str] = {}
        rows = 0
        measured = ctx.ckpt.values.tensors
        for name in unusual(ctx.ckpt.values):  # WHY only these: a tensor with a zero channel counted is one of them
            s = measured[name]
            t = ctx.ckpt.tensors.get(name)
            if t is None or not s.zero_rows or name in reported or not self.wants_values(t):
                continue
            found[name] = _what(t, s)
            rows += s.zero_rows
        if not found:
            return
        names = sorted(found)
        first = names[0]
        yield self.finding(
            f"{len(names)} weight scale tensor(s) zero whole output channels ({rows} in all; e.g. `{first}`: "
            f"{found[first]}): vLLM dequantizes those channels to 0 whatever their weights hold, silently. Re-export "
            f"the affected modules.",
            tensors=names,
            files=files_of(ctx.ckpt, names),
            details={
                "zero_channels": {n: found[n] for n in names[:200]},
                "channels_zeroed": rows,
            },
        )
