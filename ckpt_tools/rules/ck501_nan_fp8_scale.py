from __future__ import annotations

from collections.abc import Iterable

from ..dtypes import MAX_FINITE_BYTE, NAN_BYTES
from ..model.checkpoint import Checkpoint
from ..model.tensors import TensorInfo
from ..model.values import value_dtype
from ._values import is_scale, unusual
from .base import Context, Finding, Rule, files_of, register


def nan_counts(ckpt: Checkpoint) -> dict[str, int]:
    """Tensor -> number of NaN codes, over every 8-bit float scale tensor the value scan measured."""
    out: dict[str, int] = {}
    if ckpt.values is None:
        return out
    measured = ckpt.values.tensors
    for name in unusual(ckpt.values):  # WHY only these: a tensor with NaN codes counted is one of them
        s = measured[name]
        t = ckpt.tensors.get(name)
        if s.nan and t is not None and NanFp8Scale.wants_values(t):
            out[name] = s.nan
    return out


def scrub_target(t: TensorInfo) -> dict[str, object]:
    """What `scrub-nan` needs to find a flagged tensor's NaN bytes: its shard, data offsets and 8-bit encoding."""
    return {"shard": t.shard, "data_offsets": [t.begin, t.end], "encoding": value_dtype(t)}


def _maxima(ckpt: Checkpoint, names: list[str]) -> str:
    """What `scrub-nan` writes, per format of the flagged tensors (E4M3 448 = 0x7E, E8M0 2^127 = 0xFE, ...)."""
    formats = sorted({value_dtype(ckpt.tensors[n]) for n in names})
    return ", ".join(f"{f} 0x{MAX_FINITE_BYTE[f]:02X}" for f in formats if f in MAX_FINITE_BYTE)


@register
class NanFp8Scale(Rule):
    """FP8 scale bytes that are NaN (E4M3 0x7F / 0xFF, E8M0 0xFF).

    What it catches
    NaN encodings in 8-bit float scale tensors: NVFP4 block scales and FP8 weight scales stored as F8_E4M3
    (0x7F / 0xFF), MX shared-exponent scales (E8M0 0xFF, whether the header says F8_E8M0 or U8 as the
    compressed-tensors, Quark, AutoRound, ModelOpt MXFP8 and gpt-oss layouts store them), and the FNUZ / E5M2 NaN
    patterns (the OCP 8-bit floating point specification (docs/reference/vllm-0.33.md §6.1)). Only the scale
    tensors' byte ranges are read.

    Why it matters
    An unclamped FP32 -> E4M3 cast above 448 writes NaN (NVIDIA/Model-Optimizer#1633, ModelOpt 0.42-0.44 exports).
    In vLLM 0.33 a NaN in a ModelOpt NVFP4 linear `weight_scale` fails the load with a misleading "was never loaded
    (still NaN)" error; in MoE experts and compressed-tensors layers nothing checks, and the output collapses to
    `!!!!` (vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §6.2)).
    vLLM's MX kernels read an E8M0 0xFF as NaN too: every weight of the 32-element group it scales dequantizes to NaN.

    Anti-pattern
    Exporting with an old ModelOpt release that casts block scales to E4M3 without clamping.

    Fix
    `ckpt scrub-nan TARGET` rewrites only the NaN bytes, to 0x7E (448, the E4M3 maximum, what current ModelOpt clamps
    to); or re-export with a ModelOpt release that clamps.
    """

    code = "CK501"
    slug = "nan-fp8-scale"
    severity = "error"
    title = "NaN bytes in FP8 scales"
    fixable = True
    needs_values = True

    @classmethod
    def wants_values(cls, tensor: TensorInfo) -> bool:
        """Scale tensors in an 8-bit float format with NaN codes (the dtypes `scrub-nan` can repair)."""
        return value_dtype(tensor) in NAN_BYTES and is_scale(tensor)

    def check(self, ctx: Context) -> Iterable[Finding]:
        counts = nan_counts(ctx.ckpt)
        if not counts:
            return
        names = sorted(counts)
        total = sum(counts.values())
        files = files_of(ctx.ckpt, names)
        worst = max(names, key=lambda n: counts[n])
        scales = {n: scrub_target(ctx.ckpt.tensors[n]) for n in names}  # the scrub-nan plan: where to look, as what
        yield self.finding(
            f"{total} NaN byte(s) in {len(names)} FP8 scale tensor(s) (most in `{worst}`: {counts[worst]}); the "
            f"affected blocks dequantize to NaN and the model outputs `!!!!` or fails to load. Run the fix to "
            f"saturate them in place to the format's largest finite value ({_maxima(ctx.ckpt, names)}).",
            tensors=names,
            files=files,
            fix=ctx.command("scrub-nan"),
            details={"nan_bytes": {n: counts[n] for n in names}, "total_nan_bytes": total, "scales": scales},
        )
