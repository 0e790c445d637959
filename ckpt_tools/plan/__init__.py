"""The memory plan: will a checkpoint fit on a GPU, with how much context and how many sequences (`ckpt plan`).

A library under serve/ and census: it imports neither serve/ nor the pipeline. `plan_for(analysis, settings)` plans an
already analysed checkpoint (serve-flags, check-serve, inspect); `ckpt_tools.memory_plan.memory_plan(target,
settings)` reads a target first (`ckpt plan`).
"""

from __future__ import annotations

from .planner import MemoryPlan, Settings, plan_checkpoint

__all__ = ["MemoryPlan", "Settings", "plan_for"]


def plan_for(
    analysis,
    settings: Settings,
    *,
    drafter_analysis=None,
    drafter_label: str | None = None,
    refusals: tuple[str, ...] = (),
) -> MemoryPlan:
    """The plan for an `Analysis` (ckpt_tools.pipeline), optionally with a drafter's `Analysis`; `refusals`: why
    vLLM refuses the settings beyond what the plan judges itself (`plan_checkpoint`)."""
    det = analysis.detection
    drafter = None
    if drafter_analysis is not None:
        drafter = (
            drafter_analysis.checkpoint,
            drafter_analysis.detection.family,
            drafter_label or drafter_analysis.report.target,
        )
    return plan_checkpoint(
        analysis.checkpoint,
        det.family,
        settings,
        quant_method=det.quant_method or det.vllm_quantization,
        kv_word=det.kv_cache,
        target=analysis.report.target,
        drafter=drafter,
        refusals=refusals,
    )


def memory_figures(analysis) -> dict:
    """Hardware-independent figures for `ckpt inspect`: exact weight bytes per component, KV bytes per token and
    recurrent state per sequence at tensor parallel 1 with the KV dtype vLLM picks (`kv_cache` is None, with
    `kv_cache_unknown` saying why, when the config cannot size it)."""
    from ..errors import CkptError
    from .layers import FULL, GDN, MLA, SLIDING, cache_model
    from .weights import weights

    ckpt, det = analysis.checkpoint, analysis.detection
    w = weights(ckpt.tensors.values(), det.family, 1)
    out: dict = {"weights": {"bytes": w.bytes, "by_component": dict(w.by_component)}}
    try:
        cache = cache_model(
            ckpt.text_config,
            ckpt.config or {},
            tp=1,
            kv_request=None,
            quant_method=det.quant_method or det.vllm_quantization,
            kv_word=det.kv_cache,
        )
    except CkptError as exc:
        return {**out, "kv_cache": None, "kv_cache_unknown": str(exc)}
    gdn = cache.of(GDN)
    out["kv_cache"] = {
        "dtype": cache.kv_dtype,
        "bytes_per_token": sum(layer.token_bytes for layer in cache.of(FULL, MLA)),
        "attention_layers": len(cache.of(FULL, SLIDING, MLA)),
        "sliding_window_layers": len(cache.of(SLIDING)),
    }
    out["state"] = {"bytes_per_sequence": sum(layer.state_bytes for layer in gdn), "layers": len(gdn)}
    return out
