"""`ckpt plan` as a function: read a target's headers and config, then plan its memory (plan/)."""

from __future__ import annotations

from dataclasses import replace

from .pipeline import Analysis, analyze
from .plan import MemoryPlan, Settings, plan_for
from .rules.base import SEVERITY_RANK, Finding

__all__ = ["MemoryPlan", "Settings", "memory_plan", "plan_findings"]


def memory_plan(
    target: str, settings: Settings, *, drafter: str | None = None, revision: str | None = None
) -> MemoryPlan:
    """Plan `target` (a folder, a .safetensors file or a Hub repo) from its headers and config, optionally with a
    drafter, e.g. `memory_plan("./my-model", Settings(hardware="gb10"))`."""
    runtime = settings.runtime
    analysis = analyze(target, runtime=runtime, headers_only=True, revision=revision)
    drafter_analysis = analyze(drafter, runtime=runtime, headers_only=True) if drafter else None
    from .serve.checks.cs174_block_fp8_tp_size import BlockFp8TpSize

    findings = plan_findings(analysis, settings)
    # The plan judges the heads and the context itself (plan/limits.py); the block-FP8 shapes are a rule's.
    shapes = tuple(f.message for f in findings if f.code == BlockFp8TpSize.code)
    planned = plan_for(analysis, settings, drafter_analysis=drafter_analysis, drafter_label=drafter, refusals=shapes)
    return replace(planned, findings=findings)


def plan_findings(analysis: Analysis, settings: Settings) -> tuple[Finding, ...]:
    """The findings check-serve gives a command with these settings where vLLM refuses them at start-up
    (tensor-parallel-indivisible, block-fp8-tp-size, max-model-len-exceeded), most severe first: the same checks'
    code, so `ckpt plan` and `ckpt check-serve` give one verdict."""
    from .knowledge.runtimes import runtime
    from .plan.context import derived_max_model_len
    from .serve.checks.cs120_max_model_len_exceeded import context_finding
    from .serve.checks.cs173_tensor_parallel_indivisible import tensor_parallel_finding
    from .serve.checks.cs174_block_fp8_tp_size import block_fp8_tp_finding

    cfg, tp = analysis.checkpoint.text_config, settings.tensor_parallel_size
    found = [tensor_parallel_finding(cfg, tp), block_fp8_tp_finding(analysis, tp)]
    if settings.max_model_len is not None:
        derived, key = derived_max_model_len(cfg)
        env = runtime(settings.runtime).behaviour.long_max_model_len_env
        found.append(context_finding(settings.max_model_len, derived, key, env=env))
    return tuple(sorted(filter(None, found), key=lambda f: (-SEVERITY_RANK[f.severity], f.code)))
