"""The scheme vocabulary: how one linear layer is quantized (shared by detection, the knowledge tables and the
rules; detect/schemes.py reads schemes from configs and tensors)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scheme:
    """How one linear (or expert projection) is quantized.

    `kind`: `nvfp4`, `mxfp4`, `mxfp8`, `fp8`, `int4`, `int8`, `unquantized`, `unknown`.
    `activation`: `A4`, `A8`, `A16` for quantized kinds (A16 = weight-only), None when unquantized/unknown.
    """

    kind: str
    activation: str | None = None
    detail: str | None = None

    @property
    def label(self) -> str:
        if self.kind == "unquantized":
            return self.detail or "unquantized"
        if self.kind == "unknown":
            return "unknown" + (f" ({self.detail})" if self.detail else "")
        bits = {"nvfp4": "4", "mxfp4": "4", "int4": "4", "mxfp8": "8", "fp8": "8", "int8": "8"}[self.kind]
        act = self.activation or "A?"
        base = f"W{bits}{act} {self.kind.upper()}"
        return f"{base} ({self.detail})" if self.detail else base

    @property
    def quantized(self) -> bool:
        return self.kind not in ("unquantized", "unknown")


UNQUANTIZED = Scheme("unquantized")
