"""Where the memory plan (ckpt_tools.plan) meets serving: serve-flags' --max-model-len becomes the largest that fits,
and check-serve rates a command whose settings cannot fit as an error with the largest values that do."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace

from ..errors import CkptError
from ..knowledge.hardware import Hardware
from ..knowledge.runtimes import Runtime
from ..knowledge.serve_checks import check
from ..pipeline import Analysis
from ..plan import MemoryPlan, Settings, plan_for
from ..plan.render import size
from ..rules.base import Finding
from .parser import ParsedCommand
from .planner import PlannedFlag, ServePlan

PLAN_SOURCE = (
    "ckpt plan (rules/memory.toml: vllm/v1/kv_cache_interface.py and vllm/v1/core/kv_cache_planning.py "
    "check_enough_kv_cache_memory, 0.33.0)"
)


def _flag(plan: ServePlan, name: str) -> str | None:
    return next((f.value for f in plan.flags if f.flag == name), None)


def fit_serve_plan(sp: ServePlan, analysis: Analysis, drafter: Analysis | None, asked_len: int | None) -> ServePlan:
    """`sp` with --max-model-len the largest that fits (never more than the model's context), `memory` set, and
    `blocked` when the checkpoint cannot fit on the hardware at all or at the asked length."""
    if sp.hardware is None or sp.blocked:
        return sp
    util = _flag(sp, "--gpu-memory-utilization")
    batched = _flag(sp, "--max-num-batched-tokens")
    settings = Settings(
        hardware=sp.hardware.id,
        max_model_len=asked_len,
        gpu_memory_utilization=float(util) if util else None,
        max_num_batched_tokens=int(batched) if batched else None,
        prefix_caching=any(f.flag == "--enable-prefix-caching" for f in sp.flags),
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
        blocked = f"does not fit on {mem.hardware_name}: {_memory_reason(mem) or a.reason}"
    elif asked_len is not None and a.max_num_seqs < 1:
        blocked = f"--max-model-len {asked_len:,} does not fit on {mem.hardware_name}: {_memory_reason(mem)}"
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


def _int(cmd: ParsedCommand, name: str) -> int | None:
    from .linter import parse_int

    f = cmd.last(name)
    if f is None or f.value is None:
        return None
    try:
        value = parse_int(f.value, "human_int_or_auto")
    except ValueError:
        return None  # an invalid value is the flag table's finding
    return value if value > 0 else None


def _float(cmd: ParsedCommand, name: str) -> float | None:
    f = cmd.last(name)
    try:
        return float(f.value) if f is not None and f.value is not None else None
    except ValueError:
        return None


def memory_findings(
    cmd: ParsedCommand, rt: Runtime, hw: Hardware | None, analysis: Analysis, drafter_path: str | None
) -> Iterable[Finding]:
    """`memory-does-not-fit` when the command's --max-model-len x --max-num-seqs cannot fit the KV budget."""
    if hw is None:
        return
    kv = cmd.last("--kv-cache-dtype")
    settings = Settings(
        hardware=hw.id,
        tensor_parallel_size=_int(cmd, "--tensor-parallel-size") or 1,
        kv_cache_dtype=kv.value if kv is not None and kv.value else None,
        max_model_len=_int(cmd, "--max-model-len"),
        max_num_seqs=_int(cmd, "--max-num-seqs"),
        gpu_memory_utilization=_float(cmd, "--gpu-memory-utilization"),
        max_num_batched_tokens=_int(cmd, "--max-num-batched-tokens"),
        prefix_caching=cmd.last("--enable-prefix-caching") is not None,
        runtime=rt.id,
    )
    drafter = None
    if drafter_path and os.path.isdir(drafter_path):
        from ..pipeline import analyze

        try:
            drafter = analyze(drafter_path, runtime=rt.id, headers_only=True)
        except CkptError:
            drafter = None
    try:
        mem = plan_for(analysis, settings, drafter_analysis=drafter)
    except CkptError:
        return  # a --kv-cache-dtype or -tp the plan cannot size: the flag checks report the value itself
    reason = _memory_reason(mem)
    if reason:
        yield _finding(mem, reason)


def _memory_reason(mem: MemoryPlan) -> str:
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


def _finding(mem: MemoryPlan, reason: str) -> Finding:
    a, s = mem.answers, mem.settings
    length = s.max_model_len or mem.context
    numbers = (
        f"weights {size(mem.weights.per_device_bytes)} + reserve {size(mem.reserve.bytes)} of "
        f"{size(mem.usable_bytes)} usable leave {size(mem.kv_budget_bytes)} for the KV cache; one "
        f"{length:,}-token sequence needs {size(mem.request_bytes(min(length, mem.context)))}"
    )
    fixes = []
    if a.max_model_len == 0:
        fix = "a larger GPU, more --tensor-parallel-size, or a smaller checkpoint: nothing fits"
    else:
        seqs = s.max_num_seqs or 1
        at_seqs = dict(a.context_at_seqs).get(seqs, a.max_model_len)
        if s.max_num_seqs and at_seqs:
            fixes.append(f"--max-model-len {at_seqs} for {seqs} sequences")
        if a.max_num_seqs >= 1 and s.max_num_seqs:
            fixes.append(f"--max-num-seqs {a.max_num_seqs} at {a.planned_len:,} tokens")
        if not s.max_num_seqs:
            fixes.append(f"--max-model-len {a.max_model_len}")
        fix = " or ".join(fixes) if fixes else f"--max-model-len {a.max_model_len}"
    c = check("memory-does-not-fit")
    return Finding(
        code=c.code,
        slug=c.slug,
        severity=c.severity,
        message=f"the settings do not fit on {mem.hardware_name}: {reason} ({numbers})",
        count=1,
        fix=fix,
        details={
            "max_model_len": a.max_model_len,
            "max_num_seqs": a.max_num_seqs,
            "kv_budget_bytes": mem.kv_budget_bytes,
            "weights_bytes": mem.weights.per_device_bytes,
            "bytes_per_token": mem.token_bytes_per_device * mem.tp,
        },
    )
