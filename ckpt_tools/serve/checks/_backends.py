"""What CS140 and CS141 share: the command's forced kernel backends, and the backend families vLLM's NVFP4 kernel
selection distinguishes."""

from __future__ import annotations

from .base import ServeContext

# vllm/model_executor/kernels/linear/__init__.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.1): linear backends
# that run W4A4 only.
W4A4_ONLY_LINEAR = ("cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cudnn", "fbgemm")
A16_MOE_OK = (
    "auto",
    "marlin",
    "humming",
    "b12x",
    "flashinfer_b12x",
    "emulation",
)  # vllm/model_executor/layers/fused_moe/oracle/nvfp4.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.2)
FP4_TENSOR_CORE_MOE = ("cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cutedsl")


def forced_backends(ctx: ServeContext) -> tuple[str | None, str | None]:
    """(--linear-backend, --moe-backend) as the command sets them, lower-case with underscores."""
    linear = ctx.value("--linear-backend")
    moe = ctx.value("--moe-backend")
    return (
        linear.lower().replace("-", "_") if linear else None,
        moe.lower().replace("-", "_") if moe else None,
    )
