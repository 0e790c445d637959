"""Decode the small scale tensors the pipeline read (`Checkpoint.scale_bytes`) into Python floats, without numpy:
F32, BF16 and F16 little-endian (safetensors stores little-endian, safetensors src/tensor.rs, safetensors 0.8 (docs/reference/safetensors.md §8.1))."""

from __future__ import annotations

import struct

from ..model.checkpoint import Checkpoint

FLOAT_FORMATS = {"F32": ("<f", 4), "F16": ("<e", 2)}


def decode(dtype: str, blob: bytes) -> list[float] | None:
    """The values of a float tensor's bytes, or None for a dtype this helper does not decode."""
    if dtype == "BF16":
        if len(blob) % 2:
            return None
        # BF16 is the top half of an F32: shift each pair of bytes into the high half.
        return [struct.unpack("<f", b"\x00\x00" + blob[i:i + 2])[0] for i in range(0, len(blob), 2)]
    fmt = FLOAT_FORMATS.get(dtype)
    if fmt is None or len(blob) % fmt[1]:
        return None
    return [v for (v,) in struct.iter_unpack(fmt[0], blob)]


def values(ckpt: Checkpoint, name: str) -> list[float] | None:
    """Decoded values of a tensor whose bytes were read, else None."""
    blob = (ckpt.scale_bytes or {}).get(name)
    t = ckpt.tensors.get(name)
    if blob is None or t is None:
        return None
    return decode(t.dtype, blob)


_F32 = struct.Struct("<f")


def scalar(ckpt: Checkpoint, name: str) -> float | None:
    """The value of a one-element float tensor whose bytes were read, else None."""
    blob = (ckpt.scale_bytes or {}).get(name)
    if blob is None:
        return None
    if len(blob) == 4 and ckpt.tensors[name].dtype == "F32":  # the common case: F32 global / input scales
        return _F32.unpack(blob)[0]
    vals = values(ckpt, name)
    return vals[0] if vals is not None and len(vals) == 1 else None
