from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

from ..kernels import KernelUse, default_profiles, kernels_for, table_version
from ..knowledge.hardware import profiles as hardware_profiles
from .base import Context, Finding, Rule, module_files, register


def _line(uses: list[KernelUse]) -> str:
    parts = [
        f"{u.modules} {u.scheme} {'expert' if u.layer == 'moe' else 'linear'} module(s) -> {u.kernel.label}"
        for u in uses
    ]
    return ", ".join(parts)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


@register
class KernelSelection(Rule):
    """Which kernel family vLLM 0.33 picks for the checkpoint's quantized layers on each GPU, and where that is a slow
    fallback.

    What it catches
    For every quantization scheme and layer kind (linear, fused MoE experts) of the checkpoint, the kernel family
    vLLM 0.33 auto-selects on each hardware profile (`--hardware`, else the runtime's default GPU, else every
    profile in rules/hardware.toml),
    from rules/kernels.toml: NVFP4 (CUTLASS / FlashInfer on capability 10.0 and up, Marlin / Humming weight-only
    below), FP8 block (DeepGEMM, FlashInfer on SM90), per-tensor and per-channel FP8 (FlashInfer / CUTLASS), FP8 MoE
    experts (FlashInfer TRTLLM / FlashInfer-CUTLASS, DeepGEMM, vLLM CUTLASS, Triton, Marlin weight-only), MXFP4
    (gpt-oss MoE backends, FlashInfer / Marlin linears), MXFP8, W8A8 int8, GPTQ / AWQ / compressed-tensors W4A16
    (Machete on SM90, Marlin, Humming when the group size does not fit Marlin). A family is a slow fallback when it
    drops what the checkpoint was made for: a W4A4 or W8A8 checkpoint on a weight-only kernel, or a generic kernel
    because the group size does not fit the fast one.
    - info: the kernel per profile (always, for a checkpoint vLLM loads).
    - warning: `--hardware` was given and a chosen profile runs a slow fallback.
    - error: vLLM has no kernel for a layer on a chosen profile (`--hardware`) or on every profile: e.g. GPTQ / AWQ
      (`auto_gptq` / `auto_awq`, Marlin-only in vLLM 0.33) with a group size Marlin does not run.
    Weight-only NVFP4 by design is nvfp4-weight-only's (CK401) and is listed here without a warning; a checkpoint
    vLLM refuses (unsupported-quant-algo and the like) or cannot read (a shard that is an LFS pointer or missing) gets
    no kernel line.

    Why it matters
    vLLM picks kernels by GPU capability (vllm/model_executor/kernels/linear/__init__.py and
    vllm/model_executor/layers/fused_moe/oracle/*.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.1, §4.2, §4.4 -
    §4.7)) and only logs the choice at startup. A W4A4 NVFP4 checkpoint on Hopper loads "fine" and runs through
    Marlin with 16-bit activations: the memory saving stays, the FP4 speed-up and the activation calibration do not.

    Anti-pattern
    Shipping an NVFP4 W4A4 or MXFP8 checkpoint for Hopper, an FP8 MoE for an Ampere GPU, or a GPTQ export with a
    group size Marlin cannot run, and expecting the speed quoted for Blackwell or Marlin.

    Fix
    Serve on a GPU whose native kernel the table names, or re-quantize for the target: FP8 (block or per-tensor) on
    Hopper, NVFP4 on Blackwell, GPTQ / AWQ with group size 32, 64 or 128.
    """

    code = "CK405"
    slug = "kernel-selection"
    severity = "info"
    title = "Kernel family per GPU"

    def check(self, ctx: Context) -> Iterable[Finding]:
        det = ctx.det
        if ctx.ckpt.unavailable_tensors:
            return  # a shard cannot be read (an LFS pointer, a missing file): nothing loads, that finding says why
        explicit = {h.id for h in ctx.hardware} != {h.id for h in hardware_profiles()}
        uses = kernels_for(det, ctx.hardware if explicit else default_profiles(det.runtime))
        if not uses:
            return
        by_hw: dict[str, list[KernelUse]] = {}
        for u in uses:
            by_hw.setdefault(u.hardware, []).append(u)
        slow = [u for u in uses if u.kernel.fallback]
        missing = [u for u in uses if u.kernel.family is None]
        severity = "info"
        everywhere = {u.hardware for u in missing} == {u.hardware for u in uses}
        if missing and (explicit or everywhere):  # a chosen GPU, or every GPU: vLLM fails to load the layer
            severity = "error"
        elif explicit and slow:
            severity = "warning"
        # GPUs that get the same kernels share one entry (`h200, h100: ...`), in profile order.
        same: dict[str, list[str]] = {}
        for hw, us in by_hw.items():
            same.setdefault(_line(us), []).append(hw)
        text = "; ".join(f"{', '.join(hws)}: {line}" for line, hws in same.items())
        notes = []
        if missing:
            u = missing[0]
            where = "every GPU listed" if everywhere and len(by_hw) > 1 else u.hardware
            notes.append(f"on {where} vLLM has no kernel for the {u.scheme} layers ('{u.kernel.no_kernel}')")
        if slow:
            u = slow[0]
            where = ", ".join(sorted({s.hardware for s in slow}))
            notes.append(f"slow fallback on {where}: {u.kernel.fallback}")
        yield self.finding(
            f"Kernels vLLM {table_version()} picks: {text}." + (" " + _sentence("; ".join(notes)) if notes else ""),
            files=module_files(ctx.ckpt, chain.from_iterable(c.names for c in det.classes if c.declared.quantized)),
            count=sum(u.modules for u in uses if u.hardware == uses[0].hardware),
            severity=severity,
            details={
                "kernels": {
                    hw: [
                        {
                            "scheme": u.scheme,
                            "layer": u.layer,
                            "modules": u.modules,
                            "kernel": u.kernel.family,
                            "fallback": u.kernel.fallback,
                            "source": u.kernel.source,
                        }
                        for u in us
                    ]
                    for hw, us in by_hw.items()
                }
            },
        )
