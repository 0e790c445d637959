from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...plan.limits import tensor_parallel_refusal, tensor_parallel_sizes
from ...rules.base import Finding
from .base import ServeCheck, ServeContext, flag_int, register


@register
class TensorParallelIndivisible(ServeCheck):
    """--tensor-parallel-size does not divide the model's attention heads.

    What it catches
    A --tensor-parallel-size that does not divide the text config's `num_attention_heads` (vLLM's own check), or,
    on a hybrid model, its linear-attention (GatedDeltaNet) heads (ckpt_tools/plan/limits.py). `ckpt plan -tp N`
    and `ckpt serve-flags -tp N` report this very finding, so plan, check-serve and serve-flags give one verdict.

    Why it matters
    vLLM refuses to start: 'Total number of attention heads (28) must be divisible by tensor parallel size (3).'
    A GatedDeltaNet layer cannot be split either.

    Anti-pattern
    --tensor-parallel-size 3 because the machine has three GPUs.

    Fix
    A size that divides the heads (the finding lists them), and pipeline parallelism for the remaining GPUs.

    Source
    vllm/config/model.py `ModelConfig.verify_with_parallel_config` (vLLM 0.33.0); vllm/model_executor/models/qwen3_next.py
    GatedDeltaNet (heads split over the tensor-parallel ranks)
    """

    code = "CS173"
    slug = "tensor-parallel-indivisible"
    severity = "error"
    title = "--tensor-parallel-size does not divide the heads"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        tp = flag_int(ctx.cmd, "--tensor-parallel-size")
        if tp is None:
            return
        finding = tensor_parallel_finding(ctx.analysis.checkpoint.text_config, tp)
        if finding is not None:
            yield finding


def tensor_parallel_finding(cfg: Mapping[str, Any], tp: int) -> Finding | None:
    """This check's finding on `--tensor-parallel-size tp` for a model with this text config, or None: what
    check-serve says of a command, and `ckpt plan -tp` of its settings."""
    refusal = tensor_parallel_refusal(cfg, tp)
    if not refusal:
        return None
    fewer = [n for n in tensor_parallel_sizes(cfg) if n < tp]
    return TensorParallelIndivisible().finding(refusal, fix=f"--tensor-parallel-size {fewer[-1]}" if fewer else None)
