"""Validate the quantization config against the producer's own code (optional `producers` extra).

compressed-tensors: its pydantic `QuantizationConfig` model. ModelOpt: its own `convert_hf_quant_config_format`,
which turns hf_quant_config.json into the config.json `quantization_config` ModelOpt writes; the two files must agree
with it. Both packages import torch, so this runs only when asked for (`ckpt doctor --producer-schema`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..model.checkpoint import Checkpoint
from .resolve import Detection


@dataclass(frozen=True)
class SchemaCheck:
    producer: str
    package: str | None  # "compressed-tensors 0.19.0"; None when the package is not installed
    errors: tuple[str, ...]


def _version(dist: str) -> str:
    from importlib.metadata import version

    return f"{dist} {version(dist)}"


def check_producer_schema(ckpt: Checkpoint, det: Detection) -> SchemaCheck | None:
    if det.producer == "compressed-tensors" and det.config.data is not None:
        return _compressed_tensors(det.config.data)
    if det.producer == "modelopt":
        return _modelopt(ckpt)
    return None


def _compressed_tensors(data: Mapping[str, Any]) -> SchemaCheck:
    try:
        from compressed_tensors.quantization import QuantizationConfig
        from pydantic import ValidationError
    except ImportError:
        return SchemaCheck("compressed-tensors", None, ())
    try:
        QuantizationConfig.model_validate(dict(data))
        errors: tuple[str, ...] = ()
    except ValidationError as exc:
        errors = tuple(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
    return SchemaCheck("compressed-tensors", _version("compressed-tensors"), errors)


def _modelopt(ckpt: Checkpoint) -> SchemaCheck | None:
    nested = ckpt.hf_quant_config
    flat = (ckpt.config or {}).get("quantization_config")
    if not isinstance(nested, dict):
        return None
    try:
        from modelopt.torch.export.convert_hf_config import convert_hf_quant_config_format
    except ImportError:
        return SchemaCheck("modelopt", None, ())
    try:
        expected = convert_hf_quant_config_format(dict(nested))
    except Exception as exc:  # noqa: BLE001 - whatever the producer's own converter raises on the file is the finding
        return SchemaCheck(
            "modelopt",
            _version("nvidia-modelopt"),
            (f"hf_quant_config.json: ModelOpt cannot convert it: {type(exc).__name__}: {exc}",),
        )
    errors = (
        [
            f"config.json quantization_config.{key} differs from what ModelOpt derives from hf_quant_config.json"
            for key in sorted(set(expected) | set(flat))
            if expected.get(key) != flat.get(key)
        ]
        if isinstance(flat, dict)
        else []
    )
    return SchemaCheck("modelopt", _version("nvidia-modelopt"), tuple(errors))
