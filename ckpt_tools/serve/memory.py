"""Where the memory plan (ckpt_tools.plan) meets serving: serve-flags' --max-model-len becomes the largest that fits,
and check-serve rates a command whose settings cannot fit as an error with the largest values that do (the
memory-does-not-fit check, checks/cs172_memory_does_not_fit.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from ..errors import CkptError
from ..pipeline import Analysis
from ..plan import MemoryPlan, Settings, plan_for
from ..plan.render import size
from .flags import PlannedFlag, ServePlan

PLAN_SOURCE = (
    "ckpt plan (rules/memory.toml: vllm/v1/kv_cache_interface.py and vllm/v1/core/kv_cache_planning.py "
    "check_enough_kv_cache_memory, 0.33.0)"
)


def _flag(plan: ServePlan, name: str) -> str | None:
    return next((f.value for f in plan.flags if f.flag == name), None)


def speculative_tokens(spec: Any) -> int:
    """The draft tokens per step a --speculative-config asks for (0 without one): each keeps one more recurrent-state
    page per sequence (vLLM's MambaSpec.num_speculative_blocks), as `ckpt plan --num-speculative-tokens` sizes it.
    A missing or malformed count is the speculative-config check's finding, sized here as none."""
    n = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def fit_serve_plan(sp: ServePlan, analysis: Analysis, drafter: Analysis | None, asked_len: int | None) -> ServePlan:
    """`sp` with --max-model-len the largest that fits (never more than the model's context), `memory` set, and
    `blocked` when the checkpoint cannot fit on the hardware at all or at the asked length."""
    if sp.hardware is None or sp.blocked:
        return sp
    util = _flag(sp, "--gpu-memory-utilization")
    batched = _flag(sp, "--max-num-batched-tokens")
    spec = _flag(sp, "--speculative-config")
    tp = _flag(sp, "--tensor-parallel-size")
    settings = Settings(
        hardware=sp.hardware.id,
        tensor_parallel_size=int(tp) if tp else 1,
        max_model_len=asked_len,
        gpu_memory_utilization=float(util) if util else None,
        max_num_batched_tokens=int(batched) if batched else None,
        prefix_caching=any(f.flag == "--enable-prefix-caching" for f in sp.flags),
        num_speculative_tokens=speculative_tokens(json.loads(spec)) if spec else 0,
        runtime=sp.runtime.id,
    )
    try:
        mem = plan_for(analysis, settings, drafter_analysis=drafter)
    except CkptError as exc:
        return replace(sp, notes=(*sp.notes, f"no memory plan: {exc}"))
    a = mem.answers
    flags = list(sp.flags)
    blocked = None
    if a.max_model_len == 0:
        blocked = f"does not fit on {mem.hardware_name}: {memory_reason(mem) or a.reason}"
    elif asked_len is not None and a.max_num_seqs < 1:
        blocked = f"--max-model-len {asked_len} does not fit on {mem.hardware_name}: {memory_reason(mem)}"
    elif asked_len is None:
        for i, f in enumerate(flags):
            if f.flag == "--max-model-len" and f.value is not None and a.max_model_len < int(f.value):
                flags[i] = PlannedFlag(
                    "--max-model-len",
                    str(a.max_model_len),
                    f"the largest context that fits one sequence on {mem.hardware_name} (the checkpoint's is "
                    f"{int(f.value):,}): weights {size(mem.weights.per_device_bytes)}, KV budget "
                    f"{size(mem.kv_budget_bytes)}, {mem.token_bytes_per_device * mem.tp:,} B per token",
                    PLAN_SOURCE,
                )
    warnings = (*sp.warnings, blocked) if blocked else sp.warnings
    return replace(sp, flags=tuple(flags), memory=mem, blocked=blocked, warnings=warnings)


def memory_reason(mem: MemoryPlan) -> str:
    """Why the command's length x sequences do not fit the KV budget ("" when they do). A length above the model's
    context is the context check's finding, not this one: memory is judged at the length asked."""
    a, s = mem.answers, mem.settings
    length, need = s.max_model_len or mem.context, s.max_num_seqs or 1
    if mem.kv_budget_bytes <= 0:
        return "the weights and the reserve leave no memory for the KV cache"
    if a.max_num_seqs < 1:
        return f"one sequence of {length:,} tokens does not fit (largest: {a.max_model_len:,})"
    if a.max_num_seqs < need:
        return f"{need} sequences of {length:,} tokens do not fit (at most {a.max_num_seqs})"
    return ""
