"""The memory plan: will a checkpoint fit on a GPU, with how much context and how many sequences (`ckpt plan`).

`memory_plan(target, Settings(hardware="gb10"))` reads headers only (local folders and Hub repos) and returns a
`MemoryPlan`; `plan_for(analysis, settings)` plans an already analysed checkpoint (serve-flags, check-serve, inspect).
"""

from __future__ import annotations

from .planner import MemoryPlan, Settings, plan_checkpoint

__all__ = ["MemoryPlan", "Settings", "memory_plan", "plan_for"]


def plan_for(analysis, settings: Settings, *, drafter_analysis=None, drafter_label: str | None = None) -> MemoryPlan:  # noqa: ANN001
    """The plan for an `Analysis` (ckpt_tools.pipeline), optionally with a drafter's `Analysis`."""
    det = analysis.detection
    drafter = None
    if drafter_analysis is not None:
        drafter = (drafter_analysis.checkpoint, drafter_analysis.detection.family,
                   drafter_label or drafter_analysis.report.target)
    return plan_checkpoint(analysis.checkpoint, det.family, settings,
                           quant_method=det.quant_method or det.vllm_quantization, kv_word=det.kv_cache,
                           target=analysis.report.target, drafter=drafter)


def memory_plan(target: str, settings: Settings, *, drafter: str | None = None,
                revision: str | None = None) -> MemoryPlan:
    """Plan `target` (a folder, a .safetensors file or a Hub repo) from its headers and config."""
    from ..pipeline import analyze

    runtime = settings.runtime
    analysis = analyze(target, runtime=runtime, headers_only=True, revision=revision)
    drafter_analysis = analyze(drafter, runtime=runtime, headers_only=True) if drafter else None
    return plan_for(analysis, settings, drafter_analysis=drafter_analysis, drafter_label=drafter)
