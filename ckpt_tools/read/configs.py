"""Read the small JSON files beside the shards: config.json, hf_quant_config.json and the index."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import orjson

from ..model.tensors import Index, Problem
from .source import Source

CONFIG_LIMIT = 64 * 1024 * 1024


def read_json(source: Source, name: str) -> tuple[Any, Problem | None]:
    """Parsed JSON of a small file, or a problem saying why it could not be read."""
    kind = "invalid-index" if name.endswith(".index.json") else "invalid-config"
    try:
        raw = source.read_file(name, CONFIG_LIMIT)
    except (OSError, ValueError) as exc:
        return None, Problem(name, kind, f"cannot read: {getattr(exc, 'strerror', None) or exc}")
    if raw.startswith(b"version https://git-lfs"):
        return None, Problem(name, kind, "is a Git LFS pointer, not the JSON file")
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        return None, Problem(name, kind, f"is not valid JSON: {exc}")


def read_config(source: Source, name: str) -> tuple[dict[str, Any] | None, Problem | None]:
    data, problem = read_json(source, name)
    if problem is None and not isinstance(data, dict):
        return None, Problem(name, "invalid-config", "is not a JSON object")
    return data, problem


def read_index(source: Source, name: str) -> tuple[Index | None, Problem | None]:
    data, problem = read_json(source, name)
    if problem is not None:
        return None, problem
    if not isinstance(data, dict) or not isinstance(data.get("weight_map"), dict):
        return None, Problem(name, "invalid-index", "has no `weight_map` object")
    weight_map = data["weight_map"]
    if not set(map(type, weight_map.values())) <= {str}:  # JSON strings are exactly `str`; checked in C
        return None, Problem(name, "invalid-index", "`weight_map` values must be shard file names")
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    return Index(name, MappingProxyType(weight_map), MappingProxyType(metadata)), None
