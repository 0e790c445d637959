"""Measuring value statistics (model/values.py `TensorStats`) from a tensor's bytes, piece by piece as the streaming
value scan (value_scan.py) reads them: the per-tensor accumulator, the zero-channel tracker and the fast paths over
all-plain and all-zero bytes."""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any

from ..model.values import (
    FLOAT8_DTYPES,
    INF,
    NAN,
    NEGATIVE,
    NEGATIVE_SUBNORMAL,
    PLAIN,
    SMALL_TENSOR_ELEMENTS,
    SMALLEST_NORMAL,
    SUBNORMAL,
    ZERO,
    Float8Table,
    TensorStats,
    decode_values,
    decode_wide,
    float8_table,
)

PLAIN_STEP = 256 * 1024  # bytes per min / max pair in `all_plain`: the max then reads what the min left in cache


def all_plain(dtype: str, data: bytes | bytearray | memoryview) -> bool:
    """Whether every code of 8-bit float bytes is positive, normal and finite: nothing to count, the common case.
    A min and a max over the bytes (`Float8Table.plain_range`): vector passes that release the GIL (numpy), where
    testing for each non-plain code would cost one pass per code (nine for E4M3) and hold it. Step by step over
    `PLAIN_STEP` bytes, so the second pass of each step reads the processor's cache, not memory (WHY kept: it is
    measurably faster on a scan of cached scales; docs/performance.md)."""
    if not data:
        return True
    import numpy

    codes = numpy.frombuffer(data, numpy.uint8)
    lo, hi = float8_table(dtype).plain_range
    for start in range(0, len(codes), PLAIN_STEP):
        step = codes[start : start + PLAIN_STEP]
        if step.min() < lo or step.max() > hi:
            return False
    return True


COUNT_STEP = 64 * 1024  # codes per comparison pass: the boolean result stays in the processor's cache


def class_counts(table: Float8Table, data: bytes | bytearray | memoryview) -> list[int]:
    """How many codes of `data` fall in each class (indexed by PLAIN ... NEGATIVE_SUBNORMAL). A format's classes are
    a few runs of byte values (E4M3: 0x00 zero, 0x01-0x07 subnormal, 0x08-0x7E plain, 0x7F NaN, ...), so counting
    the codes below each run's start (one vector comparison per boundary, seven for E4M3) gives every run's count.
    The cost does not depend on what the bytes hold: a piece full of NaN, negative and zero codes (a badly broken
    checkpoint) costs what a piece with one does."""
    import numpy

    classes = table.classes
    bounds = [code for code in range(1, 256) if classes[code] != classes[code - 1]]
    codes = numpy.frombuffer(data, numpy.uint8)
    below = [0] * len(bounds)
    scratch = numpy.empty(min(COUNT_STEP, len(codes)), numpy.bool_)
    for start in range(0, len(codes), COUNT_STEP):
        step = codes[start : start + COUNT_STEP]
        out = scratch[: len(step)]
        for i, bound in enumerate(bounds):
            below[i] += int(numpy.count_nonzero(numpy.less(step, bound, out=out)))
    counts = [0] * 7
    edges = [0, *below, len(codes)]
    for run_start, lo, hi in zip([0, *bounds], edges[:-1], edges[1:], strict=True):
        counts[classes[run_start]] += hi - lo
    return counts


# ---- measuring ----------------------------------------------------------------------------------------------------

WIDE_STEP = 64 * 1024  # bytes of F32 / BF16 / F16 decoded at a time (a multiple of every item size)


_ZERO_RUN = re.compile(b"\x00+")


@cache
def _zero_run(length: int) -> bytes:
    return bytes(length)


class ZeroChannels:
    """Which output channels of a scale tensor are all zero, from zero masks (one byte per element, 0x00 = zero)
    of the pieces that hold zeros; pieces without zeros cost nothing but closing an open run. Memory: O(1) for row
    layouts, one counter per channel for column layouts (allocated on the first zero)."""

    __slots__ = ("first", "full", "kind", "numel", "open", "per_column", "rows", "size")

    def __init__(self, layout: tuple[str, int], numel: int) -> None:
        self.kind, self.size = layout
        self.numel = numel
        self.open: int | None = None  # rows: start of a zero run that reached the end of the last piece
        self.rows = 0  # rows: channels found all zero so far
        self.first: int | None = None
        self.full = 0  # columns: whole rows of the tensor that are zero (each adds one zero to every column)
        self.per_column: list[int] | None = None  # columns: zeros per column outside those whole rows

    @property
    def channels(self) -> int:
        return self.numel // self.size if self.kind == "rows" else self.size

    def clean(self, base: int) -> None:
        """The piece starting at element `base` holds no zero."""
        if self.open is not None:
            self._close(self.open, base)
            self.open = None

    def zeros(self, data: bytes, base: int, count: int | None = None, table: bytes | None = None) -> None:
        """A piece starting at element `base` that holds `count` zeros (None: unknown): `data` is its zero mask
        (0x00 zero, 0x01 not), or, with `table`, its 8-bit codes and the translate table that makes that mask. Only
        the parts that can hold a whole zero row are translated: the piece's edges when they are zero, and the rows
        whose first element is."""
        if self.kind == "columns":
            self._columns(data.translate(table) if table is not None else data, base)
            return
        n = len(data)
        mask = None
        if (data[0] if table is None else table[data[0]]) == 0 or (data[-1] if table is None else table[data[-1]]) == 0:
            mask = data.translate(table) if table is not None else data  # a run touches an edge: rare
            lead = mask.find(b"\x01")
            if lead < 0:
                if self.open is None:
                    self.open = base
                return
            end = mask.rfind(b"\x01") + 1
        else:
            lead, end = 0, n
        start = 0
        if self.open is not None:
            self._close(self.open, base + lead)
            self.open, start = None, lead
        if count is None or count >= self.size:  # fewer zeros than a row: no row lies inside [start, end)
            self._inside(data, table, base, start, end)
        if end < n:
            self.open = base + end

    def _inside(self, data: bytes, table: bytes | None, base: int, start: int, end: int) -> None:
        """Count the zero rows lying wholly in [start, end) of the piece, which begins and ends with a nonzero
        element (or at the piece's edge): only rows whose first element is zero are compared, found in a strided
        slice."""
        width = self.size
        r0, r1 = -(-(base + start) // width), (base + end) // width
        if r1 <= r0:
            return
        o0 = r0 * width - base
        starts = data[o0 : o0 + (r1 - r0) * width : width]  # each row's first element
        if table is not None:
            starts = starts.translate(table)
        if width == 1:
            zeros = starts.count(b"\x00")
            if zeros:
                self._found(zeros, r0 + starts.find(b"\x00"))
            return
        needle = _zero_run(width)
        k = starts.find(b"\x00")
        while k >= 0:
            off = o0 + k * width
            row = data[off : off + width]
            if (row.translate(table) if table is not None else row) == needle:
                self._found(1, r0 + k)
            k = starts.find(b"\x00", k + 1)

    def _found(self, rows: int, first: int) -> None:
        self.rows += rows
        if self.first is None:
            self.first = first

    def _close(self, a: int, b: int) -> None:
        """Elements [a, b) are zero: count the rows inside."""
        first, last = -(-a // self.size), b // self.size
        if last > first:
            self._found(last - first, first)

    def _columns(self, mask: bytes, base: int) -> None:
        width = self.size
        if self.per_column is None:
            self.per_column = [0] * width
        counts = self.per_column
        for m in _ZERO_RUN.finditer(mask):
            a, b = base + m.start(), base + m.end()
            r0, r1 = -(-a // width), b // width
            spans: tuple[tuple[int, int], ...] = ((a, b),)
            if r1 > r0:  # whole rows inside the run: one counter, not one per element
                self.full += r1 - r0
                spans = ((a, r0 * width), (r1 * width, b))
            for lo, hi in spans:
                for i in range(lo, hi):
                    counts[i % width] += 1

    def result(self) -> tuple[int, int, int | None]:
        """(channels, zero channels, first zero channel)."""
        if self.kind == "rows":
            self.clean(self.numel)
            return self.channels, self.rows, self.first
        rows = self.numel // self.size
        if self.per_column is None:
            zero = list(range(self.size)) if rows and self.full == rows else []
        else:
            zero = [c for c, z in enumerate(self.per_column) if z + self.full == rows]
        return self.size, len(zero), zero[0] if zero else None


class Accumulator:
    """Statistics of one tensor fed in pieces of whole elements, in order (a piece may end anywhere inside the
    tensor; the scan splits its chunks on element boundaries). With a `layout` (`channel_layout`), it also finds
    the output channels whose scales are all zero."""

    __slots__ = ("channels", "count", "dtype", "inf", "max", "min", "nan", "negative", "small", "subnormal", "zero")

    def __init__(self, dtype: str, numel: int, layout: tuple[str, int] | None = None) -> None:
        self.dtype = dtype
        self.count = self.nan = self.inf = self.zero = self.negative = self.subnormal = 0
        self.min: float | None = None
        self.max: float | None = None
        self.small: bytearray | None = bytearray() if numel <= SMALL_TENSOR_ELEMENTS else None
        self.channels = ZeroChannels(layout, numel) if layout is not None else None

    def feed(self, piece: bytes) -> None:
        if self.small is not None:
            self.small += piece
            if self.channels is None:
                return  # measured once, from all its values, in `result` (most scanned tensors are one-element)
        if self.dtype in FLOAT8_DTYPES:
            self._feed_float8(piece)
        elif all_zero(piece) or not self._feed_normal_wide(piece):
            if len(piece) <= WIDE_STEP:
                self._feed_wide(piece)
                return
            # Decoded floats are Python objects: a bounded number at a time, each part trying the vector path again
            # (one NaN in a piece sends only its own part down the slow path).
            for i in range(0, len(piece), WIDE_STEP):
                part = piece[i : i + WIDE_STEP]
                if all_zero(part) or not self._feed_normal_wide(part):
                    self._feed_wide(part)

    def _feed_float8(self, piece: bytes) -> None:
        table = float8_table(self.dtype)
        base = self.count
        self.count += len(piece)
        channels = self.channels
        if all_zero(piece):  # holes of sparse files, zero-filled tensors
            self._add_class(table.classes[0], len(piece))
            if channels is not None:
                if table.classes[0] == ZERO:
                    channels.zeros(piece, base)  # all 0x00: the piece is its own zero mask
                else:
                    channels.clean(base)
            return
        if all_plain(self.dtype, piece):
            if channels is not None:
                channels.clean(base)
            return  # every code positive, normal and finite: the common case, at memory speed
        counts = class_counts(table, piece)
        for cls, n in enumerate(counts):
            if n and cls != PLAIN:
                self._add_class(cls, n)
        if channels is not None:
            if counts[ZERO]:
                channels.zeros(piece, base, counts[ZERO], table.zero_mask)
            else:
                channels.clean(base)

    def feed_plain(self, n: int) -> None:
        """`n` more 8-bit codes known to be positive, normal and finite (`all_plain` of a read holding them): only
        counted. Not for a small tensor, whose values are kept."""
        assert self.small is None and self.dtype in FLOAT8_DTYPES
        if self.channels is not None:
            self.channels.clean(self.count)
        self.count += n

    def _add_class(self, cls: int, n: int) -> None:
        if cls == NAN:
            self.nan += n
        elif cls == INF:
            self.inf += n
        elif cls == ZERO:
            self.zero += n
        elif cls in (NEGATIVE, NEGATIVE_SUBNORMAL):
            self.negative += n
        if cls in (SUBNORMAL, NEGATIVE_SUBNORMAL):
            self.subnormal += n

    def _feed_normal_wide(self, piece: bytes) -> bool:
        """Count `piece` (F32 / BF16 / F16) if every value in it is a finite normal, the common case, with vector
        passes (numpy: NaN propagates through min and max, so finite extremes mean no NaN and no infinity); False,
        counting nothing, when some value is zero, subnormal, infinite or NaN."""
        import numpy

        values = _wide_array(self.dtype, piece)
        if not values.size:
            return True
        lo, hi = values.min(), values.max()
        if not (numpy.isfinite(lo) and numpy.isfinite(hi)) or numpy.abs(values).min() < SMALLEST_NORMAL[self.dtype]:
            return False
        base = self.count
        self.count += int(values.size)
        self.negative += int(numpy.count_nonzero(values < 0))
        self._extend(float(lo), float(hi))
        if self.channels is not None:
            self.channels.clean(base)
        return True

    def _feed_wide(self, piece: bytes) -> None:
        values = decode_wide(self.dtype, piece)
        n = len(values)
        base = self.count
        self.count += n
        if not n:
            return
        channels = self.channels
        if all_zero(piece):
            self.zero += n
            self._extend(0.0, 0.0)
            if channels is not None:
                channels.zeros(bytes(n), base)
            return
        values = list(values)
        finite = [v for v in values if v - v == 0.0]  # inf - inf and nan - nan are nan
        nan = sum(1 for v in values if v != v)
        zero = values.count(0.0)
        tiny = SMALLEST_NORMAL[self.dtype]
        self.nan += nan
        self.inf += n - len(finite) - nan
        self.zero += zero
        self.negative += sum(1 for v in finite if v < 0)
        self.subnormal += sum(1 for v in finite if v != 0 and -tiny < v < tiny)
        if finite:
            self._extend(min(finite), max(finite))
        if channels is not None:
            if zero:
                channels.zeros(bytes(map(bool, values)), base, zero)  # 0.0 and -0.0 -> 0x00, any other -> 0x01
            else:
                channels.clean(base)

    def _extend(self, lo: float, hi: float) -> None:
        self.min = lo if self.min is None or lo < self.min else self.min
        self.max = hi if self.max is None or hi > self.max else self.max

    def result(self) -> TensorStats:
        if self.small is not None and self.channels is None:
            return small_stats(self.dtype, bytes(self.small))
        values = None
        lo, hi = self.min, self.max
        if self.small is not None:
            values = tuple(decode_values(self.dtype, bytes(self.small)))
            if self.dtype in FLOAT8_DTYPES:
                finite = [v for v in values if math.isfinite(v)]
                lo, hi = (min(finite), max(finite)) if finite else (None, None)
        channels, zero_rows, first = self.channels.result() if self.channels is not None else (0, 0, None)
        return TensorStats(
            self.dtype,
            self.count,
            self.nan,
            self.inf,
            self.zero,
            self.negative,
            self.subnormal,
            lo,
            hi,
            values,
            channels,
            zero_rows,
            first,
        )


def small_stats(dtype: str, blob: bytes) -> TensorStats:
    """The statistics of a small tensor (at most `SMALL_TENSOR_ELEMENTS`, no channel layout) from all its bytes at
    once: the same counts `Accumulator` keeps piece by piece, without its per-piece work."""
    values = tuple(decode_values(dtype, blob))
    finite = [v for v in values if v - v == 0.0]  # inf - inf and nan - nan are nan
    lo, hi = (min(finite), max(finite)) if finite else (None, None)
    if dtype in FLOAT8_DTYPES:
        classes = blob.translate(float8_table(dtype).classes)
        nan, inf, zero = classes.count(NAN), classes.count(INF), classes.count(ZERO)
        neg_sub = classes.count(NEGATIVE_SUBNORMAL)
        negative = classes.count(NEGATIVE) + neg_sub
        subnormal = classes.count(SUBNORMAL) + neg_sub
    else:
        tiny = SMALLEST_NORMAL[dtype]
        nan = sum(1 for v in values if v != v)
        inf = len(values) - len(finite) - nan
        zero = values.count(0.0)
        negative = sum(1 for v in finite if v < 0)
        subnormal = sum(1 for v in finite if v != 0 and -tiny < v < tiny)
    return TensorStats(dtype, len(values), nan, inf, zero, negative, subnormal, lo, hi, values)


_zeros = b""


def all_zero(piece: bytes | bytearray | memoryview) -> bool:
    """Whether every byte is zero: one memcmp against a shared zero buffer (`startswith` compares with memcmp)."""
    global _zeros
    if len(piece) > len(_zeros):
        _zeros = bytes(max(len(piece), 1 << 20))
    return _zeros.startswith(piece)


def _wide_array(dtype: str, blob: bytes | bytearray | memoryview) -> Any:
    """Little-endian F32 / BF16 / F16 bytes (whole elements) as a numpy array: F32 and F16 as they are, BF16 widened to
    the F32 it is the top half of (exact)."""
    import numpy

    if dtype == "BF16":
        return (numpy.frombuffer(blob, "<u2").astype("<u4") << 16).view("<f4")
    return numpy.frombuffer(blob, "<f4" if dtype == "F32" else "<f2")
