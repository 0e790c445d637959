"""What the memory plan derives from rules/memory.toml (knowledge.memory): the device memory a hardware profile
gives the runtime, vLLM's serve defaults for it, which tensors tensor parallelism splits, and KV dtypes by name."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..knowledge.hardware import Hardware
from ..knowledge.memory import KvDtype, memory

GIB = 1 << 30


@dataclass(frozen=True)
class Device:
    hardware: str
    bytes: int
    kind: str  # measured or nominal
    note: str
    source: str


@dataclass(frozen=True)
class ServeDefaults:
    max_num_batched_tokens: int
    max_num_seqs: int
    source: str


def kv_dtype(name: str) -> KvDtype:
    table = memory().kv_dtypes
    if name not in table:
        raise UsageError(
            f"--kv-cache-dtype {name!r} is not modelled by the memory plan; choose one of: {', '.join(table)}"
        )
    return table[name]


def dtype_bytes(name: str) -> int | None:
    return memory().dtype_bytes.get(name)


def device(hw: Hardware) -> Device:
    for e in memory().devices:
        if e.hardware == hw.id:
            return Device(hw.id, round(e.memory_gib * GIB), e.kind, e.note, e.source)
    gb = hw.memory_gb
    if gb is None:
        raise UsageError(f"hardware profile {hw.id!r} records no memory size")
    return Device(
        hw.id,
        round(float(gb) * GIB),
        "nominal",
        f"nominal {gb} GB read as GiB; the runtime sees slightly less",
        f"rules/hardware.toml memory_gb of {hw.id} (nominal)",
    )


def serve_defaults(hw: Hardware, device_bytes: int) -> ServeDefaults:
    rows = memory().serve_defaults
    for r in rows:
        if r.hardware == hw.id:
            return ServeDefaults(r.max_num_batched_tokens, r.max_num_seqs, r.source)
    for r in rows:
        if r.hardware is None and device_bytes >= float(r.min_device_gib or 0) * GIB:
            return ServeDefaults(r.max_num_batched_tokens, r.max_num_seqs, r.source)
    raise AssertionError("memory.toml serve_default has no catch-all row")  # the loader requires one


def split_across_ranks(name: str, ndim: int) -> bool:
    """Whether tensor parallelism splits this tensor across ranks (else every rank holds it in full)."""
    tp = memory().tensor_parallel
    if ndim < tp.split_min_ndim:
        return False
    return not any(p.search(name) for p in tp.replicated)
