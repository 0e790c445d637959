"""The one dtype table: safetensors dtype strings, their bit widths and what their bytes mean.

Bit widths follow the safetensors reader (`safetensors/src/tensor.rs` `Dtype::bitsize`, safetensors src/tensor.rs, safetensors 0.8 (docs/reference/safetensors.md §8.1)).
NaN encodings follow the OCP FP8 definitions (the OCP 8-bit floating point specification (docs/reference/vllm-0.33.md §6.1)).
"""

from __future__ import annotations

from math import prod

BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

# Dtypes a full-precision (unquantized) weight is stored in.
FLOAT_HIGH_PRECISION = frozenset({"F16", "BF16", "F32", "F64"})

# Byte values that are NaN in each 8-bit float format. E4M3 (fn) has no infinities: 0x7F/0xFF are its only NaNs.
NAN_BYTES: dict[str, frozenset[int]] = {
    "F8_E4M3": frozenset({0x7F, 0xFF}),
    "F8_E4M3FNUZ": frozenset({0x80}),
    "F8_E5M2": frozenset({0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}),
    "F8_E8M0": frozenset({0xFF}),
}

E4M3_MAX_BYTE = 0x7E  # +448, the largest finite E4M3 value

# What a NaN scale byte can be replaced with, per 8-bit float format (the OCP 8-bit floating point specification (docs/reference/vllm-0.33.md §6.1)): the largest finite positive
# value (E4M3 +448, E4M3FNUZ +240, E5M2 +57344, E8M0 2^127) and +0 (E8M0 has no zero).
MAX_FINITE_BYTE: dict[str, int] = {"F8_E4M3": E4M3_MAX_BYTE, "F8_E4M3FNUZ": 0x7F, "F8_E5M2": 0x7B, "F8_E8M0": 0xFE}
ZERO_BYTE: dict[str, int] = {"F8_E4M3": 0x00, "F8_E4M3FNUZ": 0x00, "F8_E5M2": 0x00}


def byte_size(dtype: str, shape: tuple[int, ...]) -> int | None:
    """Bytes a tensor of this dtype and shape occupies, or None when the bit count is not a whole byte."""
    bits = prod(shape) * BITS[dtype]
    if bits % 8:
        return None
    return bits // 8
