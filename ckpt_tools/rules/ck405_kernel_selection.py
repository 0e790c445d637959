from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

from ..kernels import KernelUse, kernel_profiles, kernels_for, table_version, text_model_type, use_dict
from ..knowledge.hardware import profiles as hardware_profiles
from .base import Context, Finding, Rule, module_files, register


def _what(u: KernelUse) -> str:
    return f"{u.modules} {u.scheme} {'expert' if u.layer == 'moe' else 'linear'} module(s)"


@register
class KernelSelection(Rule):
    """A chosen GPU runs the checkpoint's quantized layers on a slow fallback kernel, or has no kernel for them.

    What it catches
    For every quantization scheme and layer kind (linear, fused MoE experts) of the checkpoint, the kernel family
    vLLM 0.33 auto-selects on each GPU, from rules/kernels.toml (the same facts the report header's `kernels` lines
    and `ckpt inspect` give, per runtime: a runtime profile built from another vLLM release is not judged). A family
    is a slow fallback when it drops what the checkpoint was made for: a W4A4 or W8A8 checkpoint on a weight-only
    kernel, or a generic kernel because the group size does not fit the fast one.
    - warning: `--hardware` was given and a chosen GPU runs a slow fallback (W4A4 NVFP4 or MXFP8 on Hopper, FP8
      experts below SM89).
    - error: vLLM has no kernel for a layer on a chosen GPU (`--hardware`), or on every GPU the runtime runs on:
      e.g. GPTQ / AWQ (`auto_gptq` / `auto_awq`, Marlin-only in vLLM 0.33) with a group size Marlin does not run.
    Nothing otherwise: which kernel each GPU picks is a fact of the header, not a finding. Weight-only NVFP4 by
    design is nvfp4-weight-only's (CK401), never a fallback here; a checkpoint vLLM refuses (unsupported-quant-algo
    and the like) or cannot read (a shard that is an LFS pointer or missing) is not judged.

    Why it matters
    vLLM picks kernels by GPU capability (vllm/model_executor/kernels/linear/__init__.py and
    vllm/model_executor/layers/fused_moe/oracle/*.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.1, §4.2, §4.4 -
    §4.7)) and only logs the choice at startup. A W4A4 NVFP4 checkpoint on Hopper loads "fine" and runs through
    Marlin with 16-bit activations: the memory saving stays, the FP4 speed-up and the activation calibration do not.

    Anti-pattern
    Shipping an NVFP4 W4A4 or MXFP8 checkpoint for Hopper, an FP8 MoE for an Ampere GPU, or a GPTQ export with a
    group size Marlin cannot run, and expecting the speed quoted for Blackwell or Marlin.

    Fix
    Serve on a GPU whose native kernel the header names, or re-quantize for the target: FP8 (block or per-tensor) on
    Hopper, NVFP4 on Blackwell, GPTQ / AWQ with group size 32, 64 or 128.
    """

    code = "CK405"
    slug = "kernel-selection"
    severity = "warning"
    title = "Slow fallback or no kernel on the chosen GPU"

    def check(self, ctx: Context) -> Iterable[Finding]:
        det = ctx.det
        if ctx.ckpt.unavailable_tensors:
            return  # a shard cannot be read (an LFS pointer, a missing file): nothing loads, that finding says why
        explicit = {h.id for h in ctx.hardware} != {h.id for h in hardware_profiles()}
        profiles = kernel_profiles(det.runtime, ctx.hardware if explicit else ())
        uses = kernels_for(det, profiles, text_model_type(ctx.ckpt.config)) if profiles else []
        missing = [u for u in uses if u.kernel.family is None]
        everywhere = bool(missing) and {u.hardware for u in missing} == {u.hardware for u in uses}
        slow = [u for u in uses if u.kernel.fallback] if explicit else []
        if missing and (explicit or everywhere):  # a chosen GPU, or every GPU: vLLM fails to load the layer
            u = missing[0]
            where = ", ".join(dict.fromkeys(m.hardware for m in missing))
            what = " and ".join(_what(m) for m in missing if m.hardware == u.hardware)
            message = (
                f"vLLM {table_version()} has no kernel for the {what} on {where}: it stops at load with "
                f"'{u.kernel.no_kernel}'."
            )
            severity, shown = "error", missing
        elif slow:
            u = slow[0]
            where = ", ".join(dict.fromkeys(s.hardware for s in slow))
            what = " and ".join(f"the {_what(s)} on {s.kernel.family}" for s in slow if s.hardware == u.hardware)
            message = f"On {where} vLLM {table_version()} runs {what}, a slow fallback: {u.kernel.fallback}."
            severity, shown = "warning", slow
        else:
            return
        by_hw: dict[str, list[dict]] = {}
        for u in shown:
            by_hw.setdefault(u.hardware, []).append(use_dict(u))
        yield self.finding(
            message,
            files=module_files(ctx.ckpt, chain.from_iterable(c.names for c in det.classes if c.declared.quantized)),
            count=sum(u.modules for u in shown if u.hardware == shown[0].hardware),
            severity=severity,
            details={"kernels": by_hw},
        )
