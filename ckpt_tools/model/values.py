"""Value statistics of scale tensors: what the streaming value scan measured, and all that value rules judge.

The scan (`ckpt_tools.read.value_scan`, measuring with `read.value_measure`) turns each wanted tensor's bytes into one
`TensorStats`, chunk by chunk, and never keeps the bytes. The classification of every code is derived from one decoder per dtype (`decode_code` for the
8-bit float formats, IEEE half / bfloat / single for the wider ones), so the class tables cannot disagree with the
values. Formats follow the OCP 8-bit float definitions (E4M3 "fn": no infinity, NaN S.1111.111; E5M2: IEEE-like;
FNUZ: no negative zero, 0x80 is the only NaN; E8M0: exponent only, 0xFF is NaN) and IEEE 754 for F16 / BF16 / F32.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from types import MappingProxyType

from .modules import ROLES
from .tensors import TensorInfo

# Tensors of at most this many elements keep their decoded values (global / input / per-tensor scales, KV scales,
# short per-channel scales): rules compare and print them.
SMALL_TENSOR_ELEMENTS = 64

# 8-bit float formats: (exponent bits, mantissa bits, exponent bias, "fnuz" variant). E8M0 is handled apart.
_FLOAT8_LAYOUT: Mapping[str, tuple[int, int, int, bool]] = MappingProxyType(
    {
        "F8_E4M3": (4, 3, 7, False),
        "F8_E4M3FNUZ": (4, 3, 8, True),
        "F8_E5M2": (5, 2, 15, False),
        "F8_E5M2FNUZ": (5, 2, 16, True),
    }
)
FLOAT8_DTYPES = frozenset({*_FLOAT8_LAYOUT, "F8_E8M0"})
WIDE_FLOAT_DTYPES = frozenset({"F32", "BF16", "F16"})
STATS_DTYPES = FLOAT8_DTYPES | WIDE_FLOAT_DTYPES  # the dtypes the scan measures; any other tensor is not scanned
ITEM_SIZE: Mapping[str, int] = MappingProxyType({**dict.fromkeys(FLOAT8_DTYPES, 1), "F16": 2, "BF16": 2, "F32": 4})


# Scale tensors whose bytes are E8M0 though the header says U8: every MX producer stores its shared exponents as
# unsigned bytes (compressed-tensors MXFP4 `weight_scale`, Quark MXFP4 `weight_scale`, AutoRound `mx_fp`
# `weight_scale`, ModelOpt MXFP8 `weight_scale`, gpt-oss `*_scales`), and vLLM 0.33 reads them as biased E8M0
# exponents (`mxfp4.py`, `compressed_tensors_w4a4_mxfp4.py`, `quark_ocp_mx.py`, `modelopt.py` MXFP8; value
# 2^(byte - 127), 0xFF NaN). No format vLLM serves stores any other U8 weight scale.
U8_AS_E8M0_ROLES = frozenset({"weight_scale"})


def value_dtype(tensor: TensorInfo) -> str:
    """The format a tensor's bytes encode: its dtype, except MX scales stored as U8, which are E8M0."""
    if tensor.dtype == "U8" and ROLES.get(tensor.name.rpartition(".")[2]) in U8_AS_E8M0_ROLES:
        return "F8_E8M0"
    return tensor.dtype


# Weight scale roles whose rows are output channels: `weight_scale` / `weight_scale_inv` are (out, k) or
# (experts, out, k) with k = 1 (per channel), in / group (NVFP4 / MX / int groups) or in / 128 (FP8 blocks, whose rows
# are blocks of 128 channels); GPTQ / AWQ `scales` are (groups, out): their channels are columns.
_ROW_ROLES = frozenset({"weight_scale"})
_COLUMN_ROLES = frozenset({"signed_weight_scale"})


def channel_layout(tensor: TensorInfo) -> tuple[str, int] | None:
    """How a weight scale tensor's output channels lie in its bytes: ("rows", elements per channel) for contiguous
    rows, ("columns", channels) for channels along the last axis, None when no such layout is known (scalars,
    1-D scales, other roles)."""
    if tensor.numel <= 1 or len(tensor.shape) < 2 or not tensor.shape[-1]:
        return None
    role = ROLES.get(tensor.name.rpartition(".")[2])
    if role in _ROW_ROLES:
        return ("rows", tensor.shape[-1])
    if role in _COLUMN_ROLES and len(tensor.shape) == 2:
        return ("columns", tensor.shape[-1])
    return None


def decode_code(dtype: str, code: int) -> float:
    """The value of one 8-bit float code (NaN for NaN codes)."""
    if dtype == "F8_E8M0":
        return math.nan if code == 0xFF else math.ldexp(1.0, code - 127)
    ebits, mbits, bias, fnuz = _FLOAT8_LAYOUT[dtype]
    if fnuz and code == 0x80:
        return math.nan
    sign = -1.0 if code & 0x80 else 1.0
    exponent = (code >> mbits) & ((1 << ebits) - 1)
    mantissa = code & ((1 << mbits) - 1)
    if not fnuz and exponent == (1 << ebits) - 1:
        if dtype == "F8_E4M3":  # "fn": the top exponent is finite except S.1111.111
            if mantissa == (1 << mbits) - 1:
                return math.nan
        else:  # E5M2: IEEE infinities and NaNs
            return sign * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return sign * math.ldexp(mantissa, 1 - bias - mbits)
    return sign * math.ldexp((1 << mbits) + mantissa, exponent - bias - mbits)


# ---- the classes a code can be in -----------------------------------------------------------------------------

PLAIN, NAN, INF, ZERO, NEGATIVE, SUBNORMAL, NEGATIVE_SUBNORMAL = range(7)


def _class_of(dtype: str, code: int) -> int:
    value = decode_code(dtype, code)
    if math.isnan(value):
        return NAN
    if math.isinf(value):
        return INF
    if value == 0:
        return ZERO
    ebits, mbits = (8, 0) if dtype == "F8_E8M0" else _FLOAT8_LAYOUT[dtype][:2]
    subnormal = dtype != "F8_E8M0" and (code >> mbits) & ((1 << ebits) - 1) == 0
    if value < 0:
        return NEGATIVE_SUBNORMAL if subnormal else NEGATIVE
    return SUBNORMAL if subnormal else PLAIN


@dataclass(frozen=True)
class Float8Table:
    """Per 8-bit float dtype: the codes that need no counting (positive normal finite), and each code's class (one
    byte per code; `class_counts` counts a piece's codes per class).

    The plain codes of every format are one run of byte values, `plain_range` (E4M3 0x08-0x7E, E5M2 0x04-0x7B, the
    FNUZ ones 0x08-0x7F / 0x04-0x7F, E8M0 0x00-0xFE): a clean piece is found by its minimum and maximum byte."""

    plain: bytes
    classes: bytes
    values: tuple[float, ...]  # code -> value
    zero_mask: bytes  # translate table: zero codes (+0, -0) -> 0x00, every other code -> 0x01
    plain_range: tuple[int, int]  # (lowest, highest) plain code


@cache
def float8_table(dtype: str) -> Float8Table:
    """The table of one 8-bit float dtype, built on first use (the header path never pays for it)."""
    classes = bytes(_class_of(dtype, c) for c in range(256))
    plain = bytes(c for c in range(256) if classes[c] == PLAIN)
    assert plain[-1] - plain[0] + 1 == len(plain), f"{dtype}: plain codes are not one run"
    return Float8Table(
        plain=plain,
        classes=classes,
        values=tuple(decode_code(dtype, c) for c in range(256)),
        zero_mask=bytes(0 if classes[c] == ZERO else 1 for c in range(256)),
        plain_range=(plain[0], plain[-1]),
    )


# ---- statistics ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorStats:
    """What the scan measured in one tensor. Counts are exact over every element.

    `negative` counts finite values below zero (-0 is a `zero`, -inf an `inf`); `subnormal` counts nonzero values
    below the format's smallest normal, of either sign. `min` / `max` are over the finite values (None when there
    is none); for 8-bit codes they are known only for small tensors (from `values`). `values` holds every value of a
    tensor of at most `SMALL_TENSOR_ELEMENTS` elements, else None.
    """

    dtype: str
    count: int
    nan: int = 0
    inf: int = 0
    zero: int = 0
    negative: int = 0
    subnormal: int = 0
    min: float | None = None
    max: float | None = None
    values: tuple[float, ...] | None = None
    channels: int = 0
    zero_rows: int = 0
    first_zero_row: int | None = None

    @property
    def nonfinite(self) -> int:
        return self.nan + self.inf

    @property
    def scalar(self) -> float | None:
        """The value of a one-element tensor, else None."""
        return self.values[0] if self.values is not None and len(self.values) == 1 else None


@dataclass(frozen=True)
class ValueStats:
    """Tensor name -> `TensorStats` for every tensor the value scan read, plus what the scan cost.

    Weights are never rewritten by header-only repairs, so the statistics of a renamed checkpoint are these under the
    new names: `renamed()`.
    """

    tensors: Mapping[str, TensorStats]
    bytes_read: int = 0  # bytes the scan fetched (its ranges, coalesced gaps included)

    def get(self, name: str) -> TensorStats | None:
        return self.tensors.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def items(self) -> Iterable[tuple[str, TensorStats]]:
        return self.tensors.items()

    def renamed(self, mapping: Mapping[str, str | None]) -> ValueStats:
        """The same statistics after a rename: `mapping` old name -> new name (None drops the tensor); names it does
        not mention keep theirs."""
        out: dict[str, TensorStats] = {}
        for name, stats in self.tensors.items():
            new = mapping.get(name, name)
            if new is not None:
                out[new] = stats
        return replace(self, tensors=MappingProxyType(out))


SMALLEST_NORMAL: Mapping[str, float] = MappingProxyType({"F32": 2.0**-126, "BF16": 2.0**-126, "F16": 2.0**-14})


_NATIVE_LITTLE_F32 = struct.pack("=f", 1.0) == struct.pack("<f", 1.0)


def decode_wide(dtype: str, blob: bytes) -> Sequence[float]:
    """Values of little-endian F32 / BF16 / F16 bytes (whole elements): a float view where the platform has one."""
    if dtype == "F32":
        if _NATIVE_LITTLE_F32:
            return memoryview(blob).cast("f")
        return [v for (v,) in struct.iter_unpack("<f", blob)]
    if dtype == "BF16":
        # A BF16 is the top half of an F32: interleave two zero bytes before each pair (C-speed slice assignment).
        wide = bytearray(2 * len(blob))
        wide[2::4] = blob[0::2]
        wide[3::4] = blob[1::2]
        return decode_wide("F32", bytes(wide))
    return list(struct.unpack(f"<{len(blob) // 2}e", blob))


def decode_values(dtype: str, blob: bytes) -> list[float]:
    """Every value of a tensor's bytes in a dtype the scan measures."""
    if dtype in FLOAT8_DTYPES:
        table = float8_table(dtype).values
        return [table[b] for b in blob]
    return list(decode_wide(dtype, blob))
