from __future__ import annotations

from collections.abc import Iterable

from ...knowledge.kernels import kernel_table
from ...rules.base import Finding
from ._backends import forced_backends
from .base import ServeCheck, ServeContext, register


@register
class BackendActivationMismatch(ServeCheck):
    """A forced kernel backend that cannot run this checkpoint's NVFP4 layers on this GPU.

    What it catches
    A W4A4-only --linear-backend / --moe-backend on weight-only NVFP4 (no input global scales), or an
    FP4-tensor-core --moe-backend on a GPU without FP4 tensor cores.

    Why it matters
    --moe-backend raises ('does not support the deployment configuration'); --linear-backend falls back with a
    warning upstream and crashes on the AEON images (missing input_global_scale_inv), per the runtime profile's
    `linear_backend_w4a4_on_a16`.

    Anti-pattern
    --linear-backend flashinfer_cutlass on a checkpoint without input global scales.

    Fix
    Drop the flag (auto picks Marlin for weight-only layers) or re-quantize with input scales.

    Source
    vllm/model_executor/kernels/linear/__init__.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.1);
    vllm/model_executor/layers/fused_moe/oracle/nvfp4.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.2); the AEON
    vLLM-Ultimate DGX Spark image README (NVFP4 backend note)
    """

    code = "CS140"
    slug = "backend-activation-mismatch"
    severity = "error"
    title = "Forced kernel backend that cannot run this checkpoint's NVFP4 layers"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        facts = ctx.facts
        if facts.activation_mode is None:
            return
        linear, moe = forced_backends(ctx)
        can = kernel_table().forced_backends
        if facts.weight_only_nvfp4:
            if linear in can.w4a4_only_linear:
                crash = ctx.rt.behaviour.linear_backend_w4a4_on_a16 == "crash"
                yield self.finding(
                    f"--linear-backend {linear} runs W4A4 only, but this checkpoint's NVFP4 layers have no input "
                    f"global scales ({facts.activation_mode})"
                    + (
                        ": it crashes at load (missing input_global_scale_inv)"
                        if crash
                        else ": vLLM warns and falls back to a weight-only kernel"
                    ),
                    fix="remove --linear-backend",
                    severity=None if crash else "warning",
                )
            if facts.moe and moe and moe not in can.weight_only_moe:
                yield self.finding(
                    f"--moe-backend {moe} cannot run weight-only NVFP4 experts: vLLM raises 'NvFp4 MoE backend ... "
                    f"does not support the deployment configuration'",
                    fix="remove --moe-backend",
                )
        if ctx.hw is not None and not ctx.hw.native_fp4 and moe in can.fp4_tensor_core_moe:
            yield self.finding(
                f"--moe-backend {moe} needs FP4 tensor cores, which {ctx.hw.id} "
                f"lacks: vLLM raises 'kernel does not support current device'",
                fix="remove --moe-backend",
            )
