"""What value rules share: which tensors are scales (the suffix-role table), and the statistics the value scan
measured (`Checkpoint.values`). Rules judge statistics; they never see tensor bytes."""

from __future__ import annotations

import math
from itertools import chain, compress
from operator import attrgetter

from ..model.checkpoint import Checkpoint
from ..model.modules import ROLES, SCALE_ROLES
from ..model.tensors import TensorInfo
from ..model.values import ITEM_SIZE, WIDE_FLOAT_DTYPES, TensorStats, ValueStats, decode_values
from ._memo import once_per

_NAN, _INF, _ZERO, _NEGATIVE, _ZERO_ROWS = map(attrgetter, ("nan", "inf", "zero", "negative", "zero_rows"))
_VALUES = attrgetter("values")


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


@once_per
def unusual(values: ValueStats) -> tuple[str, ...]:
    """The measured tensors, in the statistics' order, that hold a NaN, an infinity, a zero, a negative value or a
    zero channel by their counts, or a non-finite value among their small-tensor `values`: a superset of every tensor
    nan-fp8-scale, invalid-scale-value and zero-scale-row can report (each reads one of these facts), usually empty.
    WHY those rules read only these: most of a large checkpoint's ~100k measured tensors are clean, and judging each
    by name and role costs more than this screen (docs/performance.md).

    WHY the sums are exact screens: the counts are non-negative, so a field's sum is zero exactly when every tensor's
    is; a NaN or infinity among the values makes their float sum NaN or infinite, and finite values sum to a finite
    number unless the sum overflows, in which case every tensor with values is looked at. The screens read each
    distinct statistics object once (the scan shares one among equal results), which is exact as each tensor's
    statistics are one of them."""
    stats = values.tensors.values()
    distinct = dict(zip(map(id, stats), stats, strict=True)).values()
    flagged: set[str] = set()
    for field in (_NAN, _INF, _ZERO, _NEGATIVE, _ZERO_ROWS):
        if any(map(field, distinct)):
            flagged.update(compress(values.tensors, map(field, stats)))
    if not math.isfinite(sum(chain.from_iterable(filter(None, map(_VALUES, distinct))))):
        isfinite = math.isfinite
        flagged.update(n for n, s in values.items() if s.values is not None and not all(map(isfinite, s.values)))
    if not flagged:
        return ()
    return tuple(n for n in values.tensors if n in flagged)


def decode(dtype: str, blob: bytes) -> list[float] | None:
    """The values of F32 / BF16 / F16 little-endian bytes, or None for another dtype or a partial element (for
    tools that edit values, such as the test fixtures' corrupters)."""
    if dtype not in WIDE_FLOAT_DTYPES or len(blob) % ITEM_SIZE[dtype]:
        return None
    return decode_values(dtype, blob)
