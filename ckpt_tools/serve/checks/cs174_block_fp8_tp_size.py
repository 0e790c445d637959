from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...rules.base import Context, Finding
from ...rules.ck308_block_fp8_tp_sizes import ruled_out
from .base import ServeCheck, ServeContext, flag_int, register


@register
class BlockFp8TpSize(ServeCheck):
    """--tensor-parallel-size is one the checkpoint's block-FP8 shapes rule out.

    What it catches
    A --tensor-parallel-size at which a block-FP8 layer, split over the GPUs, is no longer a whole number of blocks:
    the size block-fp8-tp-sizes (CK308) lists as ruled out for the checkpoint, now chosen by the command. The same
    judgement serves `ckpt plan -tp N` and `ckpt serve-flags -tp N`, so the three commands give one verdict. A size
    that does not divide the attention heads is tensor-parallel-indivisible's (CS173) instead, and a checkpoint no
    size works for is block-fp8-tp-sizes' error alone (the checkpoint's defect, whatever the command).

    Why it matters
    vLLM refuses to start at that size, after loading the configs on every GPU: `ValueError: Weight
    input_size_per_partition = 64 is not divisible by weight quantization block_k = 128`.

    Anti-pattern
    -tp 2 on a block-FP8 export whose o_proj input, halved, is not a multiple of 128.

    Fix
    One of the sizes the shapes allow (the finding lists them; the largest below the asked one is the fix), expert
    parallelism when only the MoE split fails, or a re-export with a smaller block.

    Source
    vllm/model_executor/layers/quantization/utils/fp8_utils.py validate_fp8_block_shape (vLLM 0.33.0); the
    block-FP8 MoE checks in vllm/model_executor/layers/quantization/fp8.py
    """

    code = "CS174"
    slug = "block-fp8-tp-size"
    severity = "error"
    title = "--tensor-parallel-size the block-FP8 shapes rule out"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        tp = flag_int(ctx.cmd, "--tensor-parallel-size")
        if tp is None:
            return
        expert_parallel = ctx.cmd.last("--enable-expert-parallel") is not None
        finding = block_fp8_tp_finding(ctx.analysis, tp, expert_parallel=expert_parallel)
        if finding is not None:
            yield finding


def block_fp8_tp_finding(analysis: Any, tp: int, *, expert_parallel: bool = False) -> Finding | None:
    """This check's finding on `--tensor-parallel-size tp` for an analysed checkpoint (`ckpt_tools.pipeline.Analysis`),
    or None: what check-serve says of a command, and `ckpt plan -tp` of its settings."""
    if tp < 1:
        return None
    ctx = Context(analysis.checkpoint, analysis.detection, (), analysis.report.target)
    hit = ruled_out(ctx, tp, expert_parallel=expert_parallel)
    if hit is None:
        return None
    why, verdicts = hit
    if not verdicts.valid:  # no size works: the checkpoint's defect, block-fp8-tp-sizes' error, not the command's
        return None
    fewer = [n for n in verdicts.valid if n < tp]
    return BlockFp8TpSize().finding(
        f"--tensor-parallel-size {tp} splits a block-FP8 layer off its blocks: {why}; vLLM refuses to start; "
        f"sizes the shapes allow: {', '.join(map(str, verdicts.valid))}",
        fix=f"--tensor-parallel-size {fewer[-1] if fewer else verdicts.valid[0]}",
    )
