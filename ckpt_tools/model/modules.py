"""Group tensors into modules by prefix, give each suffix its role, and group MoE experts per layer.

The role table is the one place that says what a tensor suffix means. Names follow the producers' writers and
vLLM's parameters (vllm/model_executor/layers/quantization/compressed_tensors/schemes, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.3); vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.1); vllm/model_executor/layers/quantization/base_config.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.4)).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

from .tensors import TensorInfo

# suffix -> role. Anything else is `other` (e.g. fused 3-D expert parameters, rotary buffers).
ROLES: Mapping[str, str] = MappingProxyType(
    {
        "weight": "weight",
        "weight_packed": "weight",
        "bias": "bias",
        "weight_scale": "weight_scale",
        "weight_scale_inv": "weight_scale",
        "weight_scale_2": "weight_global_scale",
        "weight_global_scale": "weight_global_scale",
        "input_scale": "input_scale",
        "input_global_scale": "input_scale",
        "pre_quant_scale": "pre_quant_scale",
        "weight_shape": "weight_shape",
        "weight_zero_point": "zero_point",
        "input_zero_point": "zero_point",
        "weight_g_idx": "g_idx",
        "output_scale": "kv_scale",
        "k_scale": "kv_scale",
        "v_scale": "kv_scale",
        "q_scale": "kv_scale",
        "kv_scale": "kv_scale",
        "prob_scale": "kv_scale",
        "k_zero_point": "kv_scale",
        "v_zero_point": "kv_scale",
        "q_zero_point": "kv_scale",
        "k_bias": "kv_scale",
        "v_bias": "kv_scale",
        # GPTQ / AWQ / AutoRound int packing (vLLM auto_gptq.py, auto_awq.py): `qweight` I32, `scales`, `qzeros`,
        # `g_idx` (dropped by vLLM's checkpoint weight mapper).
        "qweight": "weight",
        # Signed: AutoRound / GPTQ symmetric scales carry the sign of the group's largest-magnitude weight.
        "scales": "signed_weight_scale",
        "qzeros": "zero_point",
        "g_idx": "g_idx",
        # gpt-oss MXFP4 experts (vLLM gpt_oss.py, mxfp4.py): one `...mlp.experts` module holds both fused projections,
        # each as `*_blocks` U8 [E, rows, cols/32, 16] beside its E8M0 `*_scales` U8 [E, rows, cols/32].
        "gate_up_proj_scales": "weight_scale",
        "down_proj_scales": "weight_scale",
        "gate_up_proj_blocks": "weight",
        "down_proj_blocks": "weight",
        "svdquant_lora_a": "lora",
        "svdquant_lora_b": "lora",
    }
)

# Suffixes only compressed-tensors writes (its NVFP4 / pack-quantized naming; vllm/model_executor/layers/quantization/compressed_tensors/schemes, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.3)).
COMPRESSED_TENSORS_SUFFIXES = frozenset({"weight_packed", "weight_global_scale", "input_global_scale"})

SCALE_ROLES = frozenset(
    {"weight_scale", "weight_global_scale", "input_scale", "pre_quant_scale", "kv_scale", "signed_weight_scale"}
)

_EXPERT = re.compile(r"^(?P<layer>.+\.experts)\.(?P<expert>\d+)\.(?P<proj>[^.]+)$")


class Module(NamedTuple):
    """The tensors that share one module prefix, keyed by suffix (e.g. `weight_packed`, `input_global_scale`).

    An immutable record like the frozen dataclasses elsewhere, but a tuple (as `detect.resolve.ModuleRow`): a large
    checkpoint has tens of thousands of modules, made in one pass, and a tuple is made without a frozen `__init__`."""

    name: str
    tensors: Mapping[str, TensorInfo]
    expert: tuple[str, int, str] | None  # (experts prefix, expert id, projection) for a per-expert module: `expert_of`

    @property
    def weight(self) -> TensorInfo | None:
        t = self.tensors
        return (
            t.get("weight_packed")
            or t.get("weight")
            or t.get("qweight")
            or t.get("gate_up_proj_blocks")
            or t.get("down_proj_blocks")
        )

    @property
    def suffixes(self) -> frozenset[str]:
        return frozenset(self.tensors)


@dataclass(frozen=True)
class ExpertGroup:
    """All per-expert modules under one `...experts` prefix (the key `Checkpoint.experts` files it under): expert id
    -> projection -> module."""

    experts: Mapping[int, Mapping[str, Module]]

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.experts))


def expert_of(name: str) -> tuple[str, int, str] | None:
    """(experts prefix, expert id, projection) if `name` matches `_EXPERT`, else None, in str methods: the
    projection has no dot and the id is digits, so the last two dots are where the pattern splits; the prefix is
    the rest, `.+\\.experts` (one character or more before `.experts`, none a newline, which `.` does not match);
    `\\d` is `str.isdecimal` (Unicode decimal digits, which `int` reads)."""
    if ".experts." not in name:
        return None
    head, _, proj = name.rpartition(".")
    layer, dot, expert = head.rpartition(".")
    if (
        not dot
        or not proj
        or not expert.isdecimal()
        or not layer.endswith(".experts")
        or len(layer) <= len(".experts")
        or "\n" in layer
    ):
        return None
    return layer, int(expert), proj


def split_name(name: str) -> tuple[str, str]:
    """(module prefix, suffix). A name without a dot is its own suffix with an empty prefix."""
    prefix, _, suffix = name.rpartition(".")
    return prefix, suffix


def join_name(prefix: str, suffix: str) -> str:
    """The tensor name of `suffix` on module `prefix`: the inverse of `split_name` (a top-level tensor has no dot)."""
    return f"{prefix}.{suffix}" if prefix else suffix


def tensor_buckets(tensors: Iterable[TensorInfo]) -> dict[str, dict[str, TensorInfo]]:
    """Module prefix -> suffix -> tensor, in the tensors' order (`split_name` of every name)."""
    buckets: dict[str, dict[str, TensorInfo]] = {}
    get = buckets.get
    for t in tensors:
        prefix, _, suffix = t.name.rpartition(".")  # split_name, inlined: this runs once per tensor
        bucket = get(prefix)
        if bucket is None:
            buckets[prefix] = bucket = {}
        bucket[suffix] = t
    return buckets


def group_experts(modules: Mapping[str, Module]) -> dict[str, ExpertGroup]:
    layers: dict[str, dict[int, dict[str, Module]]] = {}
    for name, module in modules.items():
        if ".experts." not in name:
            continue
        where = module.expert
        if where is None:
            continue
        layer, expert, proj = where
        layers.setdefault(layer, {}).setdefault(expert, {})[proj] = module
    return {
        layer: ExpertGroup(MappingProxyType({e: MappingProxyType(p) for e, p in ex.items()}))
        for layer, ex in layers.items()
    }
