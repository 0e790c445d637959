"""rules/memory.toml: what the memory plan sizes with (device memory, the reserve model, KV-cache dtypes, recurrent
state dtypes, the block allocator, serve defaults, which tensors tensor parallelism replicates)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from ._load import REQUIRED, Table, build_file

KV_LAYOUTS = ("model", "dense", "per-token-head", "int4-per-token-head", "nvfp4", "opaque")


@dataclass(frozen=True)
class DeviceMemory:
    hardware: str
    memory_gib: float
    kind: str  # measured
    note: str
    source: str


@dataclass(frozen=True)
class Reserve:
    activation_gib: Mapping[str, float]  # dense / moe
    non_torch_gib: Mapping[str, float]  # tp1 / tp_many
    cuda_graph_gib: float
    sampler_gib: float
    source: str


@dataclass(frozen=True)
class KvDtype:
    id: str
    layout: str  # one of KV_LAYOUTS
    element_bytes: int
    token_bytes: int  # opaque layouts only
    mla_only: bool
    scales: str
    source: str


@dataclass(frozen=True)
class KvAuto:
    modelopt: Mapping[str, str]  # declared ModelOpt KV algo (lower case) -> --kv-cache-dtype
    compressed_tensors: str
    source: str


@dataclass(frozen=True)
class GdnState:
    layer_type: str
    conv_dtype: str  # `model`: the model dtype
    ssm_dtype_config_key: str
    ssm_dtype_default: str  # `conv`: the conv state's dtype
    source: str


@dataclass(frozen=True)
class Allocator:
    block_size: int
    hybrid_kernel_alignment: int
    concurrent_batches: int
    mamba_pages_per_sequence: int
    mamba_pages_per_sequence_prefix_caching: int
    source: str


@dataclass(frozen=True)
class ServeDefault:
    hardware: str | None  # a hardware profile, or None for a row chosen by device size
    min_device_gib: int | None
    max_num_batched_tokens: int
    max_num_seqs: int
    source: str


@dataclass(frozen=True)
class TensorParallel:
    split_min_ndim: int
    replicated: tuple[re.Pattern[str], ...]
    source: str


@dataclass(frozen=True)
class Memory:
    devices: tuple[DeviceMemory, ...]
    reserve: Reserve
    utilization_default: float  # when no user, hardware or runtime value applies
    utilization_source: str
    kv_dtypes: Mapping[str, KvDtype]
    kv_auto: KvAuto
    dtype_bytes: Mapping[str, int]
    dtype_bytes_source: str
    gated_delta_net: GdnState
    allocator: Allocator
    serve_defaults: tuple[ServeDefault, ...]
    tensor_parallel: TensorParallel


def _device(t: Table) -> DeviceMemory:
    return DeviceMemory(
        t.string("hardware"),
        t.number("memory_gib"),
        t.string("kind", "measured"),
        t.string("note", ""),
        t.string("source"),
    )


def _kv_dtype(t: Table) -> KvDtype:
    return KvDtype(
        id=t.string("id"),
        layout=t.choice("layout", KV_LAYOUTS),
        element_bytes=t.integer("element_bytes", 0),
        token_bytes=t.integer("token_bytes", 0),
        mla_only=t.boolean("mla_only", False),
        scales=t.string("scales", ""),
        source=t.string("source"),
    )


def _serve_default(t: Table) -> ServeDefault:
    return ServeDefault(
        t.opt_string("hardware"),
        t.opt_integer("min_device_gib"),
        t.integer("max_num_batched_tokens"),
        t.integer("max_num_seqs"),
        t.string("source"),
    )


def _reserve(t: Table) -> Reserve:
    return Reserve(
        t.mapping("activation_gib", (int, float), "numbers"),
        t.mapping("non_torch_gib", (int, float), "numbers"),
        t.number("cuda_graph_gib"),
        t.number("sampler_gib"),
        t.string("source"),
    )


def _kv_auto(t: Table) -> KvAuto:
    return KvAuto(t.mapping("modelopt"), t.string("compressed_tensors"), t.string("source"))


def _gdn(t: Table) -> GdnState:
    return GdnState(
        t.string("layer_type"),
        t.string("conv_dtype"),
        t.string("ssm_dtype_config_key"),
        t.string("ssm_dtype_default"),
        t.string("source"),
    )


def _allocator(t: Table) -> Allocator:
    return Allocator(
        t.integer("block_size"),
        t.integer("hybrid_kernel_alignment"),
        t.integer("concurrent_batches"),
        t.integer("mamba_pages_per_sequence"),
        t.integer("mamba_pages_per_sequence_prefix_caching"),
        t.string("source"),
    )


def _tensor_parallel(t: Table) -> TensorParallel:
    patterns = t.strs("replicated", REQUIRED)
    try:
        compiled = tuple(re.compile(p) for p in patterns)
    except re.error as exc:
        raise t.error("replicated", f"'replicated' holds an invalid regex: {exc}") from None
    return TensorParallel(t.integer("split_min_ndim"), compiled, t.string("source"))


def parse(root: Table) -> Memory:
    dtype_bytes = root.table("dtype_bytes")
    state = root.table("state")
    utilization = root.table("utilization")
    out = Memory(
        devices=root.each("device", _device),
        reserve=root.one("reserve", _reserve),
        utilization_default=utilization.number("default"),
        utilization_source=utilization.string("source"),
        kv_dtypes=MappingProxyType({k.id: k for k in root.each("kv_dtype", _kv_dtype, required=True)}),
        kv_auto=root.one("kv_auto", _kv_auto),
        dtype_bytes=dtype_bytes.values((int,), "integers", skip=("source",)),
        dtype_bytes_source=dtype_bytes.string("source"),
        gated_delta_net=state.one("gated_delta_net", _gdn),
        allocator=root.one("allocator", _allocator),
        serve_defaults=root.each("serve_default", _serve_default, required=True),
        tensor_parallel=root.one("tensor_parallel", _tensor_parallel),
    )
    for sub in (dtype_bytes, state, utilization):
        sub.done()
    if not any(r.hardware is None and r.min_device_gib == 0 for r in out.serve_defaults):
        raise root.error("serve_default", "[[serve_default]] needs a catch-all row (min_device_gib = 0)")
    return out


@cache
def memory() -> Memory:
    return build_file("memory.toml", parse, "memory/1")
