"""`ckpt plan`: will a checkpoint fit on this hardware, with how much context and how many sequences.

From headers and config alone: weights exactly (tensor data bytes), KV bytes per token and recurrent state per
sequence exactly as vLLM 0.33's per-layer KV-cache specs size them, and the budget from the hardware's device memory,
the utilization and an explicit reserve estimate (rules/memory.toml). Every figure is per rank unless named
otherwise; the JSON contract is docs/plan.schema.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .._version import __version__
from ..errors import UsageError
from ..knowledge.hardware import Hardware, hardware
from ..knowledge.memory import memory
from ..knowledge.modules import model_config
from ..knowledge.runtimes import default_runtime_id
from ..knowledge.runtimes import runtime as load_runtime
from ..model.checkpoint import Checkpoint
from ..rules.base import SEVERITY_RANK, Finding
from . import facts
from .budget import Answers, Pages, answer, pages
from .context import derived_max_model_len
from .layers import FULL, GDN, MLA, SLIDING, CacheModel, cache_model
from .limits import context_refusal, tensor_parallel_refusal
from .weights import Weights, checkpoint_weights, combine

SEQ_COUNTS = (1, 8, 32)  # the sequence counts every plan answers for (plus --max-num-seqs)


@dataclass(frozen=True)
class Settings:
    hardware: str
    tensor_parallel_size: int = 1
    kv_cache_dtype: str | None = None  # None / "auto": what the checkpoint's config and vLLM choose
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_batched_tokens: int | None = None
    prefix_caching: bool = False
    num_speculative_tokens: int = 0  # speculative decoding: each recurrent layer keeps a state page per draft token
    runtime: str | None = None


@dataclass(frozen=True)
class Reserve:
    activation_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    sampler_bytes: int
    kind: str  # dense or moe

    @property
    def bytes(self) -> int:
        return self.activation_bytes + self.non_torch_bytes + self.cuda_graph_bytes + self.sampler_bytes


@dataclass(frozen=True)
class MemoryPlan:
    target: str
    settings: Settings
    hardware_name: str
    weights: Weights
    cache: CacheModel
    pages: Pages
    device: facts.Device
    utilization: float
    utilization_reason: str
    reserve: Reserve
    context: int  # the model's own context (max_position_embeddings)
    answers: Answers
    max_num_batched_tokens: int
    drafter: str | None = None
    notes: tuple[str, ...] = field(default=())
    # check-serve's verdict on the same settings (`ckpt_tools.memory_plan.plan_findings`: an indivisible
    # --tensor-parallel-size, a --max-model-len above the context), most severe first.
    findings: tuple[Finding, ...] = ()

    def failing(self, fail_on: str = "error") -> list[Finding]:
        """Findings at or above `fail_on` (none for "none")."""
        if fail_on == "none":
            return []
        return [f for f in self.findings if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on]]

    def exit_code(self, fail_on: str = "error") -> int:
        """1 when a finding is at or above `fail_on`, or when the settings do not fit for want of memory; a refusal
        at vLLM's config check is its finding's verdict, which `fail_on` judges as check-serve does."""
        if self.failing(fail_on):
            return 1
        return 0 if self.fits or self.answers.refused else 1

    # ---- derived figures -----------------------------------------------------------------------------------------
    @property
    def tp(self) -> int:
        return self.settings.tensor_parallel_size

    @property
    def usable_bytes(self) -> int:
        return int(self.device.bytes * self.utilization)

    @property
    def kv_budget_bytes(self) -> int:
        return self.usable_bytes - self.weights.per_device_bytes - self.reserve.bytes

    @property
    def attention_layers(self) -> int:
        return len(self.cache.of(FULL, SLIDING, MLA))

    @property
    def token_bytes_per_device(self) -> int:
        """KV bytes each new token adds on one rank (full-attention and MLA layers; sliding ones stop at their
        window)."""
        return sum(layer.token_bytes for layer in self.cache.of(FULL, MLA))

    @property
    def sliding_token_bytes_per_device(self) -> int:
        return sum(layer.token_bytes for layer in self.cache.of(SLIDING))

    @property
    def state_bytes_per_device(self) -> int:
        """The recurrent state one sequence holds on one rank, as the layers size it (before page padding)."""
        return sum(layer.state_bytes for layer in self.cache.of(GDN))

    @property
    def fits(self) -> bool:
        return self.answers.fits

    def request_bytes(self, length: int) -> int:
        return self.pages.request_bytes(length)

    # ---- the JSON contract (docs/plan.schema.json) -----------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        a, tp = self.answers, self.tp
        gdn = self.cache.of(GDN)
        sliding = self.cache.of(SLIDING)
        return {
            "schema_version": 1,
            "tool": {"name": "ckpt", "version": __version__},
            "target": self.target,
            "hardware": self.settings.hardware,
            "runtime": self.settings.runtime or default_runtime_id(),
            "tensor_parallel_size": tp,
            **({"drafter": self.drafter} if self.drafter else {}),
            "weights": {
                "bytes": self.weights.bytes,
                "per_device_bytes": self.weights.per_device_bytes,
                "by_component": dict(self.weights.by_component),
            },
            "kv_cache": {
                "dtype": self.cache.kv_dtype,
                "dtype_reason": self.cache.kv_dtype_reason,
                "bytes_per_token": self.token_bytes_per_device * tp,
                "per_device_bytes_per_token": self.token_bytes_per_device,
                "attention_layers": self.attention_layers,
                "sliding_window_layers": len(sliding),
                **(
                    {
                        "sliding_window": sliding[0].sliding_window,
                        "sliding_bytes_per_token": self.sliding_token_bytes_per_device * tp,
                    }
                    if sliding
                    else {}
                ),
                "block_size": self.pages.block_size,
            },
            "state": {
                "bytes_per_sequence": self.state_bytes_per_device * tp,
                "per_device_bytes_per_sequence": self.state_bytes_per_device,
                "padded_per_device_bytes_per_sequence": (
                    self.pages.state_layers
                    * self.pages.state_page
                    * (self.pages.state_pages_per_sequence + self.pages.speculative_blocks)
                ),
                "layers": len(gdn),
                **({"dtypes": list(gdn[0].state_dtypes)} if gdn else {}),
            },
            "memory": {
                "device_bytes": self.device.bytes,
                "device_source": self.device.kind,
                "gpu_memory_utilization": self.utilization,
                "usable_bytes": self.usable_bytes,
                "reserved_bytes": self.reserve.bytes,
                "reserve": {
                    "activation_bytes": self.reserve.activation_bytes,
                    "non_torch_bytes": self.reserve.non_torch_bytes,
                    "cuda_graph_bytes": self.reserve.cuda_graph_bytes,
                    "sampler_bytes": self.reserve.sampler_bytes,
                    "model": self.reserve.kind,
                },
                "kv_budget_bytes": self.kv_budget_bytes,
            },
            "model_max_model_len": self.context,
            "fits": a.fits,
            **({"reason": a.reason} if a.reason else {}),
            "max_model_len": a.max_model_len,
            "max_num_seqs": a.max_num_seqs,
            "at_max_model_len": a.planned_len,
            "kv_cache_tokens": a.kv_cache_tokens,
            "kv_cache_max_concurrency": round(a.max_concurrency, 4),
            "max_context_by_num_seqs": [{"num_seqs": n, "max_model_len": length} for n, length in a.context_at_seqs],
            "requested": {
                k: v
                for k, v in (
                    ("max_model_len", self.settings.max_model_len),
                    ("max_num_seqs", self.settings.max_num_seqs),
                    ("kv_cache_dtype", self.settings.kv_cache_dtype),
                    ("gpu_memory_utilization", self.settings.gpu_memory_utilization),
                    ("num_speculative_tokens", self.settings.num_speculative_tokens or None),
                )
                if v is not None
            },
            "notes": list(self.notes),
            "findings": [f.to_dict() for f in self.findings],
        }


# ---- building a plan --------------------------------------------------------------------------------------------------


def model_context(ckpt: Checkpoint, asked: int | None = None) -> int:
    """The context vLLM derives when --max-model-len is not given (the smallest of the config's length keys, RoPE
    scaling applied: the same derivation serve-flags emits)."""
    length, _key = derived_max_model_len(ckpt.text_config)
    if length and length > 0:
        return length
    if asked:
        return asked
    raise UsageError("the config gives no max_position_embeddings: pass --max-model-len")


def _is_moe(cfg: Mapping[str, Any]) -> bool:
    return any(isinstance(cfg.get(k), int) and cfg[k] > 1 for k in model_config().expert_count_keys)


def _reserve(cfg: Mapping[str, Any], tp: int) -> Reserve:
    rule = memory().reserve
    kind = "moe" if _is_moe(cfg) else "dense"
    gib = facts.GIB
    return Reserve(
        activation_bytes=int(rule.activation_gib[kind] * gib),
        non_torch_bytes=int(rule.non_torch_gib["tp1" if tp == 1 else "tp_many"] * gib),
        cuda_graph_bytes=int(rule.cuda_graph_gib * gib),
        sampler_bytes=int(rule.sampler_gib * gib),
        kind=kind,
    )


def _utilization(s: Settings, hw: Hardware) -> tuple[float, str, list[str]]:
    notes: list[str] = []
    cap = hw.gpu_memory_utilization_max
    if s.gpu_memory_utilization is not None:
        value, why = s.gpu_memory_utilization, "--gpu-memory-utilization"
    elif hw.gpu_memory_utilization is not None:
        value, why = hw.gpu_memory_utilization, f"{hw.name}'s recommended value"
    else:
        rt = load_runtime(s.runtime)
        runtime_default = rt.serve.gpu_memory_utilization_default
        value = runtime_default if runtime_default is not None else memory().utilization_default
        why = f"{rt.name}'s default"
    if not 0 < value <= 1:
        raise UsageError(f"--gpu-memory-utilization {value} is outside (0, 1]")
    if cap is not None and value > cap:
        notes.append(
            f"gpu_memory_utilization {value} is above {hw.name}'s cap of {cap} (unified memory page-thrashes above it)"
        )
    return value, why, notes


def plan_checkpoint(
    ckpt: Checkpoint,
    family,
    settings: Settings,
    *,
    quant_method: str | None,
    kv_word: str | None,
    target: str,
    drafter: tuple[Checkpoint, Any, str] | None = None,
    refusals: tuple[str, ...] = (),
) -> MemoryPlan:
    """The plan for a loaded checkpoint (`family`: its architecture family; `kv_word`: the KV scheme its quant
    config declares, as detection reads it; `drafter`: (checkpoint, family, label) of a drafter to add;
    `refusals`: why vLLM refuses these settings where the plan does not judge it itself, e.g. block-FP8 shapes a
    tensor-parallel size splits off their blocks)."""
    tp = settings.tensor_parallel_size
    if tp < 1:
        raise UsageError("--tensor-parallel-size must be at least 1")
    if settings.max_model_len is not None and settings.max_model_len < 1:
        raise UsageError("--max-model-len must be at least 1")
    if settings.max_num_seqs is not None and settings.max_num_seqs < 1:
        raise UsageError("--max-num-seqs must be at least 1")
    if settings.num_speculative_tokens < 0:
        raise UsageError("--num-speculative-tokens must be at least 0")
    hw = hardware(settings.hardware)
    cfg, top = ckpt.text_config, ckpt.config or {}
    if not cfg:
        raise UsageError(f"{target} has no config.json: the memory plan needs the model's layers")
    cache = cache_model(cfg, top, tp=tp, kv_request=settings.kv_cache_dtype, quant_method=quant_method, kv_word=kv_word)
    w = checkpoint_weights(ckpt, family, tp)
    notes = list(cache.notes)
    missing = len(ckpt.unavailable_tensors) + len(ckpt.lfs_pointers)
    if missing:
        notes.append(
            f"weights are incomplete: {len(ckpt.unavailable_tensors)} tensors sit in missing or unreadable "
            f"shards and {len(ckpt.lfs_pointers)} files are Git LFS pointers (ckpt doctor names them); their "
            f"bytes are not counted"
        )
    label = None
    if drafter is not None:
        d_ckpt, d_family, label = drafter
        # check-serve judges the target's heads only (tensor-parallel-indivisible): a drafter the size cannot split
        # stays a plan that cannot be made.
        d_refusal = tensor_parallel_refusal(d_ckpt.text_config, tp)
        if d_refusal:
            raise UsageError(f"the drafter: {d_refusal}")
        d_cache = cache_model(
            d_ckpt.text_config,
            d_ckpt.config or {},
            tp=tp,
            kv_request=settings.kv_cache_dtype if settings.kv_cache_dtype else cache.kv_dtype,
            quant_method=None,
            kv_word=None,
        )
        offset = len(cache.layers)
        shifted = tuple(replace(layer, index=layer.index + offset) for layer in d_cache.layers)
        cache = CacheModel(
            layers=cache.layers + shifted,
            model_dtype=cache.model_dtype,
            kv_dtype=cache.kv_dtype,
            kv_dtype_reason=cache.kv_dtype_reason,
            notes=cache.notes,
        )
        w = combine(w, checkpoint_weights(d_ckpt, d_family, tp), "drafter")
        notes.append(f"drafter {label}: {len(d_cache.layers)} layers join the KV cache, its weights are added")
    device = facts.device(hw)
    util, util_why, util_notes = _utilization(settings, hw)
    notes += util_notes
    defaults = facts.serve_defaults(hw, device.bytes)
    batched = settings.max_num_batched_tokens or (hw.max_num_batched_tokens or 0) or defaults.max_num_batched_tokens
    p = pages(
        cache,
        max_num_batched_tokens=batched,
        prefix_caching=settings.prefix_caching,
        speculative_tokens=settings.num_speculative_tokens,
    )
    reserve = _reserve(cfg, tp)
    context = model_context(ckpt, settings.max_model_len)
    budget = int(device.bytes * util) - w.per_device_bytes - reserve.bytes
    # The verdicts check-serve gives the same command (tensor-parallel-indivisible, max-model-len-exceeded): vLLM
    # refuses these settings at start-up, before it sizes any memory.
    found = [tensor_parallel_refusal(cfg, tp)]
    if settings.max_model_len is not None:
        derived, key = derived_max_model_len(cfg)
        env = load_runtime(settings.runtime).behaviour.long_max_model_len_env
        found.append(context_refusal(settings.max_model_len, derived, key, env=env))
    refused = "; ".join(filter(None, (*found, *refusals))) or None
    ans = answer(
        p,
        budget,
        context=context,
        max_model_len=settings.max_model_len,
        max_num_seqs=settings.max_num_seqs,
        seq_counts=SEQ_COUNTS,
        refused=refused,
    )
    notes += _estimate_notes(w, cache, p, device, reserve, settings)
    return MemoryPlan(
        target=target,
        settings=settings,
        hardware_name=hw.name,
        weights=w,
        cache=cache,
        pages=p,
        device=device,
        utilization=util,
        utilization_reason=util_why,
        reserve=reserve,
        context=context,
        answers=ans,
        max_num_batched_tokens=batched,
        drafter=label,
        notes=tuple(notes),
    )


def _estimate_notes(
    w: Weights, cache: CacheModel, p: Pages, device: facts.Device, reserve: Reserve, settings: Settings
) -> list[str]:
    """What is an estimate rather than exact, said once per plan."""
    notes = [
        f"reserve is an estimate: {reserve.kind} activation peak plus non-torch memory (public empirical "
        f"model), CUDA graphs and sampler included in the activation peak"
    ]
    if device.kind != "measured":
        notes.append(f"device memory: {device.note}")
    if p.state_layers:
        notes.append(
            f"hybrid model: attention block size {p.block_size} tokens so one attention page holds a "
            f"recurrent state (FlashAttention kernel alignment assumed)"
        )
        if not settings.prefix_caching:
            notes.append(
                "prefix caching keeps 2 recurrent pages per sequence instead of 1: pass "
                "--enable-prefix-caching when the server runs with it"
            )
    if w.by_component.get("mtp"):
        notes.append("MTP weights are counted; vLLM loads them only with MTP speculation")
    if any(layer.kind == SLIDING for layer in cache.layers):
        notes.append("sliding-window layers hold at most their window plus the in-flight batched tokens")
    return notes
