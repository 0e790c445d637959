"""Typed view of rules/memory.toml: device memory, the reserve model, KV dtypes, state dtypes, the allocator."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..errors import UsageError
from ..knowledge import Hardware, load_toml

GIB = 1 << 30


@dataclass(frozen=True)
class KvDtype:
    id: str
    layout: str  # model, dense, per-token-head, int4-per-token-head, nvfp4, opaque
    element_bytes: int
    token_bytes: int  # opaque layouts only
    mla_only: bool
    scales: str
    source: str


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


def _data() -> Mapping[str, Any]:
    return load_toml("memory.toml")


@cache
def kv_dtypes() -> Mapping[str, KvDtype]:
    return {
        e["id"]: KvDtype(
            id=e["id"],
            layout=e["layout"],
            element_bytes=int(e.get("element_bytes", 0)),
            token_bytes=int(e.get("token_bytes", 0)),
            mla_only=bool(e.get("mla_only", False)),
            scales=str(e.get("scales", "")),
            source=e["source"],
        )
        for e in _data()["kv_dtype"]
    }


def kv_dtype(name: str) -> KvDtype:
    table = kv_dtypes()
    if name not in table:
        raise UsageError(
            f"--kv-cache-dtype {name!r} is not modelled by the memory plan; choose one of: {', '.join(table)}"
        )
    return table[name]


def kv_auto() -> Mapping[str, Any]:
    return _data()["kv_auto"]


def dtype_bytes(name: str) -> int | None:
    value = _data()["dtype_bytes"].get(name)
    return int(value) if isinstance(value, int) else None


def gdn_state() -> Mapping[str, Any]:
    return _data()["state"]["gated_delta_net"]


def allocator() -> Mapping[str, Any]:
    return _data()["allocator"]


def reserve() -> Mapping[str, Any]:
    return _data()["reserve"]


def device(hw: Hardware) -> Device:
    for e in _data().get("device", []):
        if e["hardware"] == hw.id:
            return Device(
                hw.id,
                round(float(e["memory_gib"]) * GIB),
                e.get("kind", "measured"),
                e.get("note", ""),
                e["source"],
            )
    gb = hw.data.get("memory_gb")
    if not isinstance(gb, (int, float)):
        raise UsageError(f"hardware profile {hw.id!r} records no memory size")
    return Device(
        hw.id,
        round(float(gb) * GIB),
        "nominal",
        f"nominal {gb} GB read as GiB; the runtime sees slightly less",
        f"rules/hardware.toml memory_gb of {hw.id} (nominal)",
    )


def serve_defaults(hw: Hardware, device_bytes: int) -> ServeDefaults:
    rows = _data()["serve_default"]
    for r in rows:
        if r.get("hardware") == hw.id:
            return ServeDefaults(int(r["max_num_batched_tokens"]), int(r["max_num_seqs"]), r["source"])
    for r in rows:
        if "hardware" not in r and device_bytes >= float(r["min_device_gib"]) * GIB:
            return ServeDefaults(int(r["max_num_batched_tokens"]), int(r["max_num_seqs"]), r["source"])
    raise AssertionError("memory.toml serve_default has no catch-all row")


@cache
def _replicated() -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in _data()["tensor_parallel"]["replicated"])


def split_across_ranks(name: str, ndim: int) -> bool:
    """Whether tensor parallelism splits this tensor across ranks (else every rank holds it in full)."""
    if ndim < int(_data()["tensor_parallel"]["split_min_ndim"]):
        return False
    return not any(p.search(name) for p in _replicated())


def source_of(section: str) -> str:
    value = _data()[section]
    return str(value.get("source", "")) if isinstance(value, dict) else ""
