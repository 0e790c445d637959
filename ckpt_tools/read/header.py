"""Parse and validate one safetensors header exactly as the safetensors reader does, from a few bytes.

Rules follow `safetensors/src/tensor.rs` (`SafeTensors::read_metadata`, `Metadata::validate`) and the serde
derive behind it (docs/reference/safetensors-header.md restates them): 8-byte little-endian length N <= 100,000,000;
UTF-8 JSON (serde_json: nesting below 128 levels, numbers within f64); an object whose `__metadata__` (once, or null)
maps strings to strings and whose other keys are tensors, a repeated tensor name keeping the last entry; each entry
an object with `dtype`, `shape`, `data_offsets` once each (other fields ignored) or a 3-element array in that order;
a known dtype (or `{"F32": null}`, serde's other spelling of an enum); shape and offsets u64 integers (`-0` is a
float); offsets sorted, contiguous from 0; the shape's product, then times the bit width, without 64-bit overflow;
span = numel x bits / 8; 8 + N + last end == file length. The length field is never trusted with an allocation: we
only ever read min(N, file size) bytes.

orjson reads the common header; `header_json.parse_exact` re-reads it only when a cheap byte count says orjson may
have lost something the reader sees (a repeated key, `-0`, an escaped colon, an unusual entry). Every step is linear
in the header bytes, and no message prints an unbounded value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import repeat
from math import prod
from operator import attrgetter, itemgetter, mul, sub
from types import MappingProxyType
from typing import Any

import orjson

from ..dtypes import BITS
from ..model.tensors import LfsPointer, Problem, Shard, TensorInfo
from .header_json import NEG_ZERO, U64_MAX, HeaderJsonError, JObject, check_depth, parse_exact
from .source import Source

MAX_HEADER_SIZE = 100_000_000
_BY_OFFSETS = attrgetter("begin", "end")
_DTYPE, _SHAPE, _BEGIN, _END = itemgetter(1), itemgetter(2), itemgetter(4), itemgetter(5)  # TensorInfo fields
_GET_DTYPE, _GET_SHAPE, _GET_OFFSETS = itemgetter("dtype"), itemgetter("shape"), itemgetter("data_offsets")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_DTYPES = {dtype: dtype for dtype in BITS}  # one str object per dtype: tensors share it, comparisons hit identity
FIRST_READ = 64 * 1024  # one read covers the length field and most headers
LFS_MAGIC = b"version https://git-lfs"
FIELDS = ("dtype", "shape", "data_offsets")
SHOWN = 120  # characters of a name or value a message quotes


@dataclass(frozen=True)
class ShardRead:
    shard: Shard | None
    lfs: LfsPointer | None
    problems: tuple[Problem, ...]


def _lfs_pointer(name: str, head: bytes) -> LfsPointer:
    oid = size = None
    for line in head.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        if key == "oid":
            oid = value.strip()
        elif key == "size" and value.strip().isdigit():
            size = int(value.strip())
    return LfsPointer(name=name, oid=oid, size=size)


def read_shard(source: Source, name: str, first_read: int = FIRST_READ) -> ShardRead:
    """Read and validate the header of one shard through any source.

    `first_read` bytes are read first; if the header is longer, exactly the rest of it is read next. Remote sources
    pass an estimate of the header length here so that most shards cost one request.
    """
    try:
        size = source.size(name)
        head = source.read_range(name, 0, min(size, max(first_read, 8)))
    except OSError as exc:
        return ShardRead(None, None, (Problem(name, "unreadable", f"cannot read: {exc.strerror or exc}"),))
    if head.startswith(LFS_MAGIC):
        pointer = _lfs_pointer(name, head)
        return ShardRead(None, pointer, ())
    if size < 8:
        return _fail(name, "header-too-small", f"file is {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", head, 0)
    if n > MAX_HEADER_SIZE:
        return _fail(name, "header-too-large", f"declared header length {n:,} exceeds the 100,000,000-byte limit")
    if 8 + n > size:
        return _fail(name, "truncated", f"declared header length {n:,} runs past the end of the {size:,}-byte file")
    if 8 + n <= len(head):
        raw = head[8 : 8 + n]
    else:
        try:
            raw = head[8:] + source.read_range(name, len(head), 8 + n - len(head))
        except OSError as exc:
            return _fail(name, "unreadable", f"cannot read header: {exc.strerror or exc}")
    return parse_header(name, size, raw)


def _fail(name: str, kind: str, message: str, tensor: str | None = None) -> ShardRead:
    return ShardRead(None, None, (Problem(name, kind, message, tensor),))


class _Invalid(Exception):
    """The reader rejects the header: `kind` and a one-line message for the Problem."""

    def __init__(self, kind: str, message: str, tensor: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.tensor = kind, message, tensor


class _Reread(Exception):
    """orjson's view may differ from the reader's here: judge the exact parse instead."""


def parse_header(name: str, file_size: int, raw: bytes) -> ShardRead:
    """Validate header bytes `raw` (without the length prefix) of a file of `file_size` bytes."""
    try:
        try:
            # One-byte searches first (memchr): most headers have no backslash and no minus sign at all.
            if (b"\\" in raw and b"\\u003" in raw) or (b"-" in raw and b"-0" in raw and NEG_ZERO.search(raw)):
                raise _Reread
            obj = orjson.loads(raw)
            tensors, metadata, dupes, data_end = _entries(name, obj, raw)
        except (_Reread, orjson.JSONDecodeError, RecursionError) as fast_error:
            tensors, metadata, dupes, data_end = _entries_exact(name, raw, fast_error)
        problems = _validate_layout(name, file_size, len(raw), tensors, data_end)
    except _Invalid as exc:
        return _fail(name, exc.kind, exc.message, exc.tensor)
    if dupes:
        problems.insert(
            0,
            Problem(
                name,
                "duplicate-key",
                f"header repeats tensor name(s): {', '.join(_quote(d) for d in dupes[:5])}",
                dupes[0],
            ),
        )
    valid = not any(p.kind != "duplicate-key" for p in problems)
    shard = Shard(
        name=name, size=file_size, header_len=len(raw), metadata=metadata, tensors=tuple(tensors), valid=valid
    )
    return ShardRead(shard, None, tuple(problems))


def _entries_exact(name: str, raw: bytes, fast_error: Exception) -> tuple[list[TensorInfo], Any, list[str], int | None]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as uexc:
        raise _Invalid("invalid-utf8", f"header is not valid UTF-8 (byte {uexc.start})") from None
    try:
        obj = parse_exact(raw, text)
    except HeaderJsonError as exc:
        kind = "nesting-too-deep" if exc.too_deep else "invalid-json"
        detail = fast_error if isinstance(fast_error, orjson.JSONDecodeError) and kind == "invalid-json" else exc
        raise _Invalid(kind, f"header is not valid JSON: {_clip(str(detail))}") from None
    return _entries(name, obj, None)


def _entries(name: str, obj: Any, raw: bytes | None) -> tuple[list[TensorInfo], Any, list[str], int | None]:
    """Tensors (in header order, the last of a repeated name), metadata and repeated names of a parsed header, and
    where the data region ends when the tensors already passed every check of `_validate_layout` but the file
    length in header order (`_plain_entries`; None when `_validate_layout` must judge them).

    `raw` is given on the fast path (an orjson tree): anything orjson may have parsed differently from serde_json
    raises `_Reread`. Without it, `obj` comes from `parse_exact` and repeated keys are visible as `JObject.pairs`.
    """
    if type(obj) is not dict and type(obj) is not JObject:
        raise _Invalid("invalid-schema", f"header is a JSON {_json_type(obj)}, not an object")
    pairs = obj.pairs if type(obj) is JObject else None
    keys = len(obj)
    metadata = obj.pop("__metadata__", None)
    if pairs is not None:
        if sum(1 for key, _ in pairs if key == "__metadata__") > 1:
            raise _Invalid("duplicate-field", "header repeats `__metadata__` (the reader rejects a repeated field)")
        items: Any = [(k, v) for k, v in pairs if k != "__metadata__"]
    else:
        items = obj.items()
    if metadata is not None:
        meta_values = (
            metadata.pairs if type(metadata) is JObject else metadata.items() if type(metadata) is dict else None
        )
        if meta_values is None or not all(type(v) is str for _, v in meta_values):
            raise _Invalid("invalid-schema", "__metadata__ must map strings to strings")
        keys += len(metadata)
        metadata = MappingProxyType(metadata)

    # Integers from either parser are within [-2**63, 2**64 - 1] (orjson and serde_number make floats beyond that;
    # the standard library's int only runs on tokens under 20 digits), so a non-negative int is a u64 as it is.
    plain = _plain_entries(name, obj) if raw is not None else None
    unusual_keys = 0  # keys beyond three per entry (an enum-map dtype), or fewer (an array entry)
    data_end = None
    if plain is not None:
        tensors, data_end = plain
    else:
        tensors, unusual_keys = _entries_one_by_one(name, items, raw is None)
    keys += 3 * len(tensors) + unusual_keys
    dupes: list[str] = []
    if pairs is not None:  # a repeated tensor name: every entry had to be valid, serde's map keeps the last
        found: dict[str, TensorInfo] = {}
        for t in tensors:
            if t.name in found:
                dupes.append(t.name)
                del found[t.name]
            found[t.name] = t
        tensors = list(found.values())
    # The fast path: orjson's dict has no repeated name or field; the colon count proves the text had none either.
    if raw is not None and raw.count(b":") != keys:
        _check_colons(raw, keys, obj, metadata)
    return tensors, metadata, dupes, data_end


def _plain_entries(name: str, obj: dict[str, Any]) -> tuple[list[TensorInfo], int | None] | None:
    """The tensors of an orjson tree whose every entry is plain (an object of exactly `dtype`, `shape`,
    `data_offsets`, a known dtype string, a list of non-negative ints, a [begin, end] pair of non-negative ints), in
    whole-list operations without a per-tensor Python loop; None if any entry is not, for `_entries_one_by_one` to
    judge. `type(x) is int` is the test (a bool is not an int here), as in the entry-by-entry path. With the tensors
    comes the end of their data region when, in header order, they pass every check of `_validate_layout` but the
    file length (`_in_order_end`), else None."""
    infos = list(obj.values())
    if not infos:
        return [], None
    try:
        # Of the values JSON has, only an object has a "dtype" item (an array, a string, a number, null raise
        # TypeError, an object without it KeyError): past the three getters every entry is an object holding the
        # three fields, and the length test makes them its only ones. Only a string equals a dtype name (a number
        # or a boolean raises KeyError, an array or an object TypeError), so `dtypes` are known dtypes, one str
        # object per dtype.
        dtypes = list(map(_DTYPES.__getitem__, map(_GET_DTYPE, infos)))
        shapes = list(map(_GET_SHAPE, infos))
        offsets = list(map(_GET_OFFSETS, infos))
        # Two values each for the offsets (a number or null raises TypeError); what they are, next.
        if set(map(len, infos)) != {3} or set(map(type, shapes)) != {list} or set(map(len, offsets)) != {2}:
            return None
    except (KeyError, TypeError):
        return None
    if not _unsigned_ints(shapes) or not _unsigned_ints(offsets):
        return None
    begins = list(map(_FIRST, offsets))
    ends = list(map(_SECOND, offsets))
    shape_tuples = list(map(tuple, shapes))
    tensors = list(
        map(
            tuple.__new__,
            repeat(TensorInfo),
            zip(obj, dtypes, shape_tuples, repeat(name), begins, ends),
        )
    )
    return tensors, _in_order_end(dtypes, shape_tuples, begins, ends)


def _unsigned_ints(values: list[Any]) -> bool:
    """Whether every value is an array of non-negative integers (an `int` here, as `type(x) is int` would say), in
    two C passes over orjson's own encoding of them instead of a type test per member. WHY it is exact: orjson
    writes an int as its decimal digits (a negative one with `-`), and every other JSON value with a character
    that is not a digit, comma or bracket (a float with `.` or `e`, `true` / `false` / `null`, a string's quotes,
    an object's braces), so a text of digits, commas and brackets holds only non-negative ints and arrays; with
    exactly one `[` per value (and the outer one) every value is an array and none holds an array. An array nested
    past orjson's encoding limit (254 levels) is not one of integers either: the entry-by-entry path judges it."""
    try:
        text = orjson.dumps(values)
    except orjson.JSONEncodeError:
        return False
    return not text.translate(None, b"0123456789,[]") and text.count(b"[") == len(values) + 1


def _in_order_end(dtypes: list[str], shapes: list[tuple[int, ...]], begins: list[int], ends: list[int]) -> int | None:
    """The last tensor's end if the tensors, in header order, pass every check of `_validate_layout` but the file
    length, else None (that walk then judges them, as `_layout_in_order` does). Each tensor's span check depends on
    its (dtype, shape, byte span) only, so it is made once per distinct triple: a few hundred in a checkpoint."""
    if begins[0] != 0 or begins[1:] != ends[:-1]:
        return None
    if max(map(len, shapes)) > _PROD_DIMS:
        return None
    for dtype, shape, span in set(zip(dtypes, shapes, map(sub, ends, begins), strict=True)):
        bits = prod(shape) * BITS[dtype]
        # A zero dimension hides an overflowing partial product from `prod` (the reader's `checked_mul` fails on
        # it): such tensors, rare, are left to the exact walk.
        if bits != 8 * span or bits > U64_MAX or (not bits and len(shape) >= 3):
            return None
    return ends[-1]


def _entries_one_by_one(name: str, items: Any, exact: bool) -> tuple[list[TensorInfo], int]:
    """Tensors entry by entry; plain entries are checked inline, anything else goes through `_entry`, the one
    statement of the rules. Also returns the keys beyond three per entry (an enum-map dtype; fewer for an array)."""
    tensors: list[TensorInfo] = []
    append = tensors.append
    bits = BITS
    new, info_type = tuple.__new__, TensorInfo  # TensorInfo(...) would go through a Python-level __new__
    dtypes = _DTYPES
    unusual_keys = 0
    for tname, info in items:
        kind = type(info)
        if kind is dict and len(info) == 3:
            try:
                dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            except (KeyError, TypeError, ValueError):
                dtype = None
            if (
                type(dtype) is str
                and dtype in bits
                and type(shape) is list
                and type(begin) is int
                and type(end) is int
                and begin >= 0
                and end >= 0
            ):
                for d in shape:
                    if type(d) is not int or d < 0:
                        break
                else:
                    append(new(info_type, (tname, dtypes[dtype], tuple(shape), name, begin, end)))
                    continue
        dtype, shape, begin, end, entry_keys = _entry(tname, info, exact)
        append(TensorInfo(tname, dtypes[dtype], shape, name, begin, end))
        unusual_keys += entry_keys - 3
    return tensors, unusual_keys


def _entry(tname: str, info: Any, exact: bool) -> tuple[str, tuple[int, ...], int, int, int]:
    """One tensor entry as serde's `TensorInfo`: (dtype, shape, begin, end, keys it holds). Raises `_Invalid`, or
    `_Reread` on the fast path (`exact` false) when orjson may have read it differently."""
    kind = type(info)
    keys = 0
    if kind is dict or kind is JObject:
        if len(info) > 3 and not exact:
            raise _Reread  # other fields: the reader ignores them, but parses their numbers its own way
        entry_pairs = info.pairs if kind is JObject else None
        if entry_pairs is not None:
            for field in FIELDS:
                if sum(1 for key, _ in entry_pairs if key == field) > 1:
                    raise _Invalid(
                        "duplicate-field",
                        f"tensor {_quote(tname)} repeats its `{field}` field (the reader rejects a repeated field)",
                        tname,
                    )
        if len(info) > 3 or entry_pairs is not None:
            for key, value in entry_pairs or info.items():
                if key not in FIELDS:  # ignored by the reader, but parsed: its nesting limit applies
                    try:
                        check_depth(value, 3)
                    except HeaderJsonError as exc:
                        raise _Invalid(
                            "nesting-too-deep",
                            f"header is not valid JSON: {exc} in field `{_clip(key)}` of tensor {_quote(tname)}",
                            tname,
                        ) from None
        try:
            dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        except KeyError:
            raise _Invalid(
                "invalid-schema", f"tensor {_quote(tname)} lacks dtype, shape or data_offsets", tname
            ) from None
        keys = 3
    elif kind is list:
        # serde fills a struct from a sequence in field order: [dtype, shape, data_offsets], exactly three.
        if len(info) != 3:
            raise _Invalid(
                "invalid-schema",
                f"tensor {_quote(tname)} is an array of {len(info)} values, not [dtype, shape, data_offsets]",
                tname,
            )
        dtype, shape, offsets = info
    else:
        raise _Invalid("invalid-schema", f"tensor {_quote(tname)} is a JSON {_json_type(info)}, not an object", tname)
    if type(dtype) is not str:
        dtype = _enum_form(dtype)
        keys += 1
    if type(dtype) is not str or dtype not in BITS:
        raise _Invalid("unknown-dtype", f"tensor {_quote(tname)} has unknown dtype {_preview(dtype)}", tname)
    if type(shape) is not list:
        raise _Invalid("invalid-schema", f"tensor {_quote(tname)} has a shape that is not an array", tname)
    for d in shape:
        if type(d) is not int or d < 0:
            raise _Invalid(
                "invalid-schema",
                f"tensor {_quote(tname)} has a shape entry that is not an unsigned 64-bit integer: {_preview(d)}",
                tname,
            )
    if type(offsets) is not list or len(offsets) != 2:
        raise _Invalid("invalid-schema", f"tensor {_quote(tname)} lacks a [begin, end] data_offsets pair", tname)
    begin, end = offsets
    if type(begin) is not int or type(end) is not int or begin < 0 or end < 0:
        raise _Invalid(
            "invalid-schema",
            f"tensor {_quote(tname)} has data_offsets that are not unsigned 64-bit "
            f"integers: [{_preview(begin)}, {_preview(end)}]",
            tname,
        )
    return dtype, tuple(shape), begin, end, keys


def _check_colons(raw: bytes, keys: int, obj: dict[str, Any], metadata: Any) -> None:
    """orjson keeps the last of a repeated key. Every key in the text has one colon after it, so if the colons in the
    text are exactly the parsed keys plus the colons inside parsed strings, no key repeats. Only an escaped colon
    (`\\u003a`) could hide one, and headers with a `\\u003` never take the fast path."""
    in_strings = "".join(obj).count(":")
    if metadata is not None:
        in_strings += sum(k.count(":") + v.count(":") for k, v in metadata.items())
    if raw.count(b":") != keys + in_strings:
        raise _Reread


def _enum_form(dtype: Any) -> Any:
    """serde also reads an enum from a one-key map whose value is null: `{"F32": null}` is dtype F32."""
    if type(dtype) in (dict, JObject) and len(dtype) == 1:
        if type(dtype) is JObject and dtype.pairs:
            return dtype  # `{"F32": null, "F32": null}`: serde wants a map with a single key
        ((variant, value),) = dtype.items()
        if value is None and type(variant) is str:
            return variant
    return dtype


def _validate_layout(
    name: str, file_size: int, n: int, tensors: list[TensorInfo], data_end: int | None = None
) -> list[Problem]:
    """`Metadata::validate` in its order of checks, then the file length. Raises `_Invalid`. `data_end`: where the
    data region ends if the tensors are already known to pass every other check in header order (`_in_order_end`)."""
    if data_end is not None and 8 + n + data_end == file_size:
        return []
    if _layout_in_order(file_size, n, tensors):
        return []
    expected = 0
    for t in sorted(tensors, key=_BY_OFFSETS):
        if t.begin != expected or t.end < t.begin:
            what = (
                "overlaps the previous tensor"
                if t.begin < expected
                else "leaves a gap"
                if t.begin > expected
                else "ends before it begins"
            )
            raise _Invalid(
                "invalid-offset",
                f"tensor {_quote(t.name)} {what} (data_offsets [{t.begin}, {t.end}], expected begin {expected})",
                t.name,
            )
        expected = t.end
        # The reader multiplies left to right with `checked_mul`: an overflow is an error even if a later dimension
        # is 0. With two dimensions or fewer no partial product can overflow unless the whole one does.
        shape = t.shape
        bits = (prod(shape) if len(shape) < 3 else _checked_numel(t)) * BITS[t.dtype]
        if bits > U64_MAX:  # the element count, or the element count times the bit width
            raise _overflow(t)
        if bits % 8:
            raise _Invalid(
                "misaligned-slice",
                f"tensor {_quote(t.name)} ({t.dtype} {_shape_text(t.shape)}) does not end on a byte boundary",
                t.name,
            )
        if bits // 8 != t.end - t.begin:
            raise _Invalid(
                "invalid-span",
                f"tensor {_quote(t.name)} spans {t.end - t.begin} bytes but {t.dtype} {_shape_text(t.shape)} needs {bits // 8}",
                t.name,
            )
    if 8 + n + expected != file_size:
        gap = file_size - (8 + n + expected)
        what = (
            f"{gap:,} trailing bytes after the last tensor" if gap > 0 else f"file is {-gap:,} bytes short (truncated)"
        )
        raise _Invalid("incomplete-buffer", f"data region does not match the file size: {what}")
    return []


def _layout_in_order(file_size: int, n: int, tensors: list[TensorInfo]) -> bool:
    """True if the tensors, in header order, pass every check of `_validate_layout`: whole-list operations in C,
    no per-tensor Python loop. Writers emit tensors in offset order, so this is the common case. Header order
    contiguous from 0 is already the order `sorted(key=(begin, end))` gives (begins and ends never decrease, and a
    stable sort keeps it), so a True here is exactly the verdict of the sorted walk; on False that walk runs and
    reports the first problem in the reader's order."""
    if not tensors:
        return 8 + n == file_size
    begins = list(map(_BEGIN, tensors))
    ends = list(map(_END, tensors))
    if begins[0] != 0 or begins[1:] != ends[:-1] or 8 + n + ends[-1] != file_size:
        return False
    if max(map(len, map(_SHAPE, tensors))) > _PROD_DIMS:
        return False
    # Bits per tensor: numel x bit width, compared with 8 x the span (so also whole bytes and end >= begin).
    bits = list(map(mul, map(prod, map(_SHAPE, tensors)), map(BITS.__getitem__, map(_DTYPE, tensors))))
    if bits != list(map(mul, map(sub, ends, begins), repeat(8))) or max(bits) > U64_MAX:
        return False
    # A zero dimension hides an overflowing partial product from `prod` (the reader's `checked_mul` fails on it):
    # such tensors, rare, are left to the exact walk.
    return not bits.count(0) or all(len(t.shape) < 3 for t in tensors if t.begin == t.end)


# `prod` of this many 64-bit dimensions is at most a 4,096-bit integer: cheap. A longer shape goes to the walk, whose
# `_checked_numel` stops at the first partial product past 64 bits, as the reader's `checked_mul` does: linear in the
# dimensions, where `prod` of 80,000 huge dimensions grows a 5-million-bit integer (quadratic, 37 s).
_PROD_DIMS = 64


def _checked_numel(t: TensorInfo) -> int:
    numel = 1
    for d in t.shape:
        numel *= d
        if numel > U64_MAX:
            raise _overflow(t)
    return numel


def _overflow(t: TensorInfo) -> _Invalid:
    return _Invalid(
        "shape-overflow",
        f"tensor {_quote(t.name)} ({t.dtype} {_shape_text(t.shape)}): its element count or bit count overflows 64 bits",
        t.name,
    )


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN] + f"... ({len(text):,} characters)"


def _quote(name: str) -> str:
    return f"`{_clip(name)}`"


def _json_type(value: Any) -> str:
    return {
        dict: "object",
        JObject: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _preview(value: Any) -> str:
    """A value as a message may show it: bounded length, never an unbounded int -> str conversion."""
    if type(value) is str:
        return _clip(repr(value))
    if type(value) is int or type(value) is float:
        return repr(value)  # parsed numbers are 64-bit integers or floats: short
    return f"a JSON {_json_type(value)}"


def _shape_text(shape: tuple[int, ...]) -> str:
    if len(shape) <= 8:
        return str(list(shape))
    return f"[{', '.join(map(str, shape[:4]))}, ... {len(shape):,} dimensions]"
