"""What value rules share: which tensors are scales (the suffix-role table), and the statistics the value scan
measured (`Checkpoint.values`). Rules judge statistics; they never see tensor bytes."""

from __future__ import annotations

import math

from ..model.checkpoint import Checkpoint
from ..model.modules import ROLES, SCALE_ROLES
from ..model.tensors import TensorInfo
from ..model.values import ITEM_SIZE, WIDE_FLOAT_DTYPES, TensorStats, decode_values


def role(name: str) -> str | None:
    """The role of a tensor's suffix (`ROLES`), or None."""
    return ROLES.get(name.rpartition(".")[2])


def is_scale(tensor: TensorInfo) -> bool:
    """A tensor whose suffix has a scale role: adding a suffix to `ROLES` with a role in `SCALE_ROLES` makes the value
    rules that judge that role scan it."""
    return role(tensor.name) in SCALE_ROLES


def stats(ckpt: Checkpoint, name: str) -> TensorStats | None:
    """The statistics of a tensor the scan measured, else None."""
    return ckpt.values.get(name) if ckpt.values is not None else None


def scalar(ckpt: Checkpoint, name: str) -> float | None:
    """The value of a one-element F32 / BF16 / F16 tensor the scan measured, else None."""
    return scalar_of(stats(ckpt, name))


def scalar_of(s: TensorStats | None) -> float | None:
    """The value that statistics of a one-element F32 / BF16 / F16 tensor hold, else None."""
    return s.scalar if s is not None and s.dtype in WIDE_FLOAT_DTYPES else None


def usable_scalar(s: TensorStats | None) -> float:
    """`scalar_of` when it is finite and above zero (a global scale rules can compare), else NaN: an absent or
    unusable scale, which invalid-scale-value and missing-scale report."""
    v = scalar_of(s)
    return v if v is not None and math.isfinite(v) and v > 0 else math.nan


def decode(dtype: str, blob: bytes) -> list[float] | None:
    """The values of F32 / BF16 / F16 little-endian bytes, or None for another dtype or a partial element (for
    tools that edit values, such as the test fixtures' corrupters)."""
    if dtype not in WIDE_FLOAT_DTYPES or len(blob) % ITEM_SIZE[dtype]:
        return None
    return decode_values(dtype, blob)
