from __future__ import annotations

from collections.abc import Iterable

from ...errors import CkptError
from ...plan import MemoryPlan, Settings, plan_for
from ...plan.limits import tensor_parallel_refusal
from ...plan.render import size
from ...rules.base import Finding
from ..memory import memory_reason, speculative_tokens
from ..parser import ParsedCommand
from ._speculative import speculative_config
from .base import ServeCheck, ServeContext, flag_int, register


@register
class MemoryDoesNotFit(ServeCheck):
    """The command's settings do not fit the GPU's memory.

    What it catches
    Weights plus the KV cache for --max-model-len x --max-num-seqs above what --gpu-memory-utilization leaves on
    the hardware profile: the memory plan of `ckpt plan` for the command's --tensor-parallel-size,
    --kv-cache-dtype, --max-num-batched-tokens, prefix caching, drafter and --speculative-config draft tokens (each
    keeps one more recurrent-state page per sequence on hybrid models). Judged only with a hardware profile; a
    length above the model's context is max-model-len-exceeded's finding, so memory is judged at the length asked.

    Why it matters
    vLLM loads the weights for minutes, then refuses to start when one request at max_model_len does not fit the KV
    budget (or runs out of memory loading weights); sequences beyond the budget are preempted.

    Anti-pattern
    --max-model-len 262144 --max-num-seqs 64 copied from a bigger GPU; a ~400 GB checkpoint on a 128 GB DGX Spark.

    Fix
    The largest --max-model-len / --max-num-seqs that fit, from `ckpt plan` (given with the finding), or more
    --tensor-parallel-size, or a smaller KV dtype.

    Source
    vllm/v1/core/kv_cache_planning.py (0.33.0) check_enough_kv_cache_memory / estimate_max_model_len;
    vllm/v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config; rules/memory.toml
    """

    code = "CS172"
    slug = "memory-does-not-fit"
    severity = "error"
    title = "The settings do not fit the GPU's memory"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        cmd, hw, rt = ctx.cmd, ctx.hw, ctx.rt
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
            num_speculative_tokens=speculative_tokens(speculative_config(ctx)[1]),
            runtime=rt.id,
        )
        if tensor_parallel_refusal(ctx.analysis.checkpoint.text_config, settings.tensor_parallel_size):
            return  # vLLM stops before it sizes memory: tensor-parallel-indivisible's verdict
        try:
            mem = plan_for(ctx.analysis, settings, drafter_analysis=ctx.drafter_analysis)
        except CkptError:
            return  # a --kv-cache-dtype or -tp the plan cannot size: the flag checks report the value itself
        reason = memory_reason(mem)
        if reason:
            yield self._finding(mem, reason)

    def _finding(self, mem: MemoryPlan, reason: str) -> Finding:
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
        return self.finding(
            f"the settings do not fit on {mem.hardware_name}: {reason} ({numbers})",
            fix=fix,
            details={
                "max_model_len": a.max_model_len,
                "max_num_seqs": a.max_num_seqs,
                "kv_budget_bytes": mem.kv_budget_bytes,
                "weights_bytes": mem.weights.per_device_bytes,
                "bytes_per_token": mem.token_bytes_per_device * mem.tp,
            },
        )


def _int(cmd: ParsedCommand, name: str) -> int | None:
    value = flag_int(cmd, name, "human_int_or_auto")
    return value if value is not None and value > 0 else None


def _float(cmd: ParsedCommand, name: str) -> float | None:
    f = cmd.last(name)
    try:
        return float(f.value) if f is not None and f.value is not None else None
    except ValueError:
        return None
