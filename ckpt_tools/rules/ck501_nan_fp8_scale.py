from __future__ import annotations

from typing import Iterable

from ..dtypes import NAN_BYTES
from ..model.modules import ROLES, SCALE_ROLES
from .base import Context, Finding, Rule, files_of, register


def is_scanned(name: str, dtype: str) -> bool:
    """Scale tensors in an 8-bit float format: the ones whose bytes this rule reads."""
    return dtype in NAN_BYTES and ROLES.get(name.rsplit(".", 1)[-1]) in SCALE_ROLES


def nan_counts(ctx: Context) -> dict[str, int]:
    """Tensor -> number of NaN bytes, over every scanned scale tensor whose bytes were read."""
    out: dict[str, int] = {}
    data = ctx.ckpt.scale_bytes or {}
    for name, blob in data.items():
        t = ctx.ckpt.tensors.get(name)
        if t is None or not is_scanned(name, t.dtype):
            continue
        nan = NAN_BYTES[t.dtype]
        n = sum(blob.count(b) for b in nan)
        if n:
            out[name] = n
    return out


@register
class NanFp8Scale(Rule):
    """FP8 scale bytes that are NaN (E4M3 0x7F / 0xFF, E8M0 0xFF).

    What it catches
    NaN encodings in 8-bit float scale tensors: NVFP4 block scales and FP8 weight scales stored as F8_E4M3
    (0x7F / 0xFF), MX scales stored as F8_E8M0 (0xFF), and the FNUZ / E5M2 NaN patterns (the OCP 8-bit floating point specification (docs/reference/vllm-0.33.md §6.1)). Only
    the scale tensors' byte ranges are read.

    Why it matters
    An unclamped FP32 -> E4M3 cast above 448 writes NaN (NVIDIA/Model-Optimizer#1633, ModelOpt 0.42-0.44 exports).
    In vLLM 0.33 a NaN in a ModelOpt NVFP4 linear `weight_scale` fails the load with a misleading "was never loaded
    (still NaN)" error; in MoE experts and compressed-tensors layers nothing checks, and the output collapses to
    `!!!!` (vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §6.2)).

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

    def check(self, ctx: Context) -> Iterable[Finding]:
        counts = nan_counts(ctx)
        if not counts:
            return
        names = sorted(counts)
        total = sum(counts.values())
        files = files_of(ctx.ckpt, names)
        worst = max(names, key=lambda n: counts[n])
        yield self.finding(
            f"{total} NaN byte(s) in {len(names)} FP8 scale tensor(s) (most in `{worst}`: {counts[worst]}); the "
            f"affected blocks dequantize to NaN and the model outputs `!!!!` or fails to load. Run the fix to "
            f"saturate them to 448 (0x7E) in place.",
            tensors=names,
            files=files,
            fix=ctx.command("scrub-nan"),
            details={"nan_bytes": {n: counts[n] for n in names[:200]}, "total_nan_bytes": total},
        )
