from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from ..knowledge.modules import fused_groups_for
from ..knowledge.scales import global_scales
from ..model.tensors import TensorInfo
from ..model.values import WIDE_FLOAT_DTYPES, TensorStats
from ._values import usable_scalar
from .base import Context, Finding, Rule, files_of, register

RELATIVE_TOLERANCE = 1e-3  # F32 rounding of identical amaxes stays far below this
ERROR_RATIO = 1.5  # above this a shard's weights dequantize at least a third off: garbage, not accuracy loss


@cache
def _global_suffixes() -> frozenset[str]:
    g = global_scales()
    return frozenset(g.weight + g.input)


def fused_layers(ctx: Context) -> dict[tuple[str, str], list[str]]:
    """(parent, vLLM fused name) -> its NVFP4 shard modules, sorted, for every fused layer with at least two shards on
    disk (including each expert's gate/up pair, vLLM's w13), in layer order."""
    group_of = {shard: g for g in fused_groups_for(ctx.det.family.id) for shard in g.shards}
    layers: dict[tuple[str, str], list[str]] = {}
    for c in ctx.det.classes:
        if c.disk.kind != "nvfp4":
            continue
        for module in c.names:
            parent, _, last = module.rpartition(".")
            group = group_of.get(last)
            if group is not None:
                layers.setdefault((parent, group.fused), []).append(module)
    return {layer: sorted(shards) for layer, shards in sorted(layers.items()) if len(shards) > 1}


def _mismatches(ctx: Context, suffixes: tuple[str, ...]) -> list[dict[str, Any]]:
    """The fused layers whose shards' usable global scales (`suffixes`) differ beyond F32 rounding, the largest ratio
    first (fused layers in name order, then `suffixes` order, among equals)."""
    if ctx.ckpt.values is None:
        return []
    measured = ctx.ckpt.values.tensors
    found: list[dict[str, Any]] = []
    for (parent, fused), shards in fused_layers(ctx).items():
        for suffix in suffixes:
            mismatch = _layer_mismatch(measured, f"{parent}.{fused}", suffix, shards)
            if mismatch is not None:
                found.append(mismatch)
    found.sort(key=lambda m: -m["ratio"])
    return found


def _layer_mismatch(
    measured: Mapping[str, TensorStats], fused: str, suffix: str, shards: list[str]
) -> dict[str, Any] | None:
    """One fused layer's mismatch for one global-scale suffix, or None (a shard's scale absent or unusable, which
    other rules report, or the scales agree)."""
    vals: dict[str, float] = {}
    for s in shards:
        v = usable_scalar(measured.get(f"{s}.{suffix}"))
        if math.isnan(v):
            return None  # absent (other rules) or unusable (invalid-scale-value)
        vals[s] = v
    found: list[dict[str, Any]] = []
    _compare(found, fused, suffix, shards, vals)
    return found[0] if found else None


def _compare(found: list[dict[str, Any]], fused: str, suffix: str, shards: list[str], vals: dict[str, float]) -> None:
    """Record the fused layer when its shards' usable global scales differ beyond F32 rounding."""
    lo, hi = min(vals.values()), max(vals.values())
    ratio = hi / lo
    if ratio > 1 + RELATIVE_TOLERANCE:
        found.append(
            {
                "fused": fused,
                "suffix": suffix,
                "ratio": round(ratio, 4),
                "values": {s.rsplit(".", 1)[-1]: v for s, v in vals.items()},
                "tensors": [f"{s}.{suffix}" for s in shards],
            }
        )


def _example(m: dict) -> str:
    vals = ", ".join(f"{k} {v:.6g}" for k, v in m["values"].items())
    return f"`{m['fused']}` {m['suffix']}: {vals} (ratio {m['ratio']:.3g}x)"


@register
class FusedScaleMismatch(Rule):
    """Global scales of shards vLLM fuses (q/k/v, gate/up) differ.

    What it catches
    NVFP4 shards that vLLM loads into one fused parameter (q/k/v -> `qkv_proj`, gate/up -> `gate_up_proj` and each
    expert's `w13`, Qwen3.5 `in_proj_qkv`/`in_proj_z` -> `in_proj_qkvz`; rules/modules.toml) whose scalar weight
    global scales (`weight_scale_2`, `weight_global_scale`) differ, with the ratio between the largest and the
    smallest (docs/reference/failures.md #11). Differing input global scales are reported as info. Reads only the
    scalar F32 scale tensors (a few bytes each); skipped with `--headers-only`.

    Why it matters
    A fused layer has one global scale. vLLM keeps the maximum (the gate's for MoE experts) and only warns ("the
    weight global scale is different for parallel layers", "w1_weight_scale_2 must match w3_weight_scale_2.
    Accuracy may be affected."; vllm/model_executor/layers/quantization/compressed_tensors/schemes, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.3); vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.1); vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.2)): every other shard's weights dequantize off by its
    ratio. The model boots and answers worse; ratios of 2-10x have been seen in published checkpoints.

    Anti-pattern
    Independent per-tensor observers for fused shards (llm-compressor releases that do not know a model's fusion,
    e.g. Qwen3.5 `in_proj_qkv`/`in_proj_z`), or ModelOpt exports without synchronised amax for fused layers.

    Fix
    Re-export with the fused shards' global scales synchronised (llm-compressor `update_fused_layer_weight_global_
    scales`, ModelOpt's fused-amax sync), or requantize the affected shards to a shared global scale.
    """

    code = "CK502"
    slug = "fused-scale-mismatch"
    severity = "warning"
    title = "Fused shards have different global scales"
    needs_values = True

    @classmethod
    def wants_values(cls, tensor: TensorInfo) -> bool:
        """One-element float weight / input global scales (a few bytes each)."""
        return (
            tensor.dtype in WIDE_FLOAT_DTYPES
            and tensor.name.rpartition(".")[2] in _global_suffixes()
            and tensor.numel == 1
        )

    def check(self, ctx: Context) -> Iterable[Finding]:
        if not ctx.ckpt.values:
            return
        scales = global_scales()
        for suffixes, what, effect in (
            (
                scales.weight,
                "weight global scales",
                "vLLM keeps one scale per fused layer, so the other shards' weights dequantize off by up to {ratio:.3g}x. "
                "Re-export with synchronised global scales.",
            ),
            (
                scales.input,
                "input global scales",
                "vLLM quantizes the fused input with one scale (the max), which is correct but coarser for the other "
                "shards.",
            ),
        ):
            found = _mismatches(ctx, suffixes)
            if not found:
                continue
            worst = found[0]["ratio"]
            severity = "info" if suffixes is scales.input else "error" if worst >= ERROR_RATIO else "warning"
            yield self.finding(
                f"{len(found)} fused layer(s) have different {what} across their shards (worst {_example(found[0])}); "
                + effect.format(ratio=worst),
                tensors=[t for m in found for t in m["tensors"]],
                files=files_of(ctx.ckpt, (t for m in found for t in m["tensors"])),
                count=len(found),
                severity=severity,
                details={
                    "max_ratio": worst,
                    "layers": [{k: v for k, v in m.items() if k != "tensors"} for m in found[:200]],
                },
            )
