"""JSON exactly as the safetensors reader's parser (serde_json) sees it: the slow path for hostile headers.

orjson is fast but forgets what the reader rejects on: a repeated key (orjson keeps the last one, serde rejects a
repeated struct field), `-0` (orjson: the integer 0; serde: the float -0.0, which is no `usize`), where a huge
number stops being finite, and how deep the nesting is. `parse_exact` re-reads the text with the standard library's
C scanner, keeping every repeated key (`JObject.pairs`), classifying number tokens the way serde_json does
(`_serde_int`, `_serde_float`: the standard library's own reading where it is serde_json's, `serde_number` past it), and
rejecting lone surrogates; `check_depth` applies the nesting limit where a valid header may nest. Everything is
linear in the text: no big integer is ever built from a long digit string, and no step recurses on the nesting.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

U64_MAX = 2**64 - 1
I64_MIN = -(2**63)
I32_MAX = 2**31 - 1
# serde_json's recursion limit: a container at depth 128 (the top-level object is depth 1) is an error.
MAX_DEPTH = 128
_POW10 = tuple(float(f"1e{i}") for i in range(309))  # serde_json's POW10 table, 1e0 ..= 1e308


class HeaderJsonError(ValueError):
    """The reader's JSON parser rejects the text; the message says why in one line. `too_deep`: for nesting."""

    def __init__(self, message: str, too_deep: bool = False) -> None:
        super().__init__(message)
        self.too_deep = too_deep


class JObject(dict):
    """A JSON object in which some key repeats (the dict keeps the last value); `pairs` holds every (key, value) in
    document order. Objects without a repeated key stay plain dicts."""

    __slots__ = ("pairs",)
    pairs: list[tuple[str, Any]]


def _constant(name: str) -> Any:
    raise HeaderJsonError(f"`{name}` is not JSON")


def _accumulate(digits: str, significand: int) -> tuple[int, int]:
    """Add decimal digits to a u64 significand until the next one would overflow: (significand, digits taken)."""
    taken = 0
    if significand == 0:  # leading zeros never overflow; count them without a Python loop over the digits
        taken = len(digits) - len(digits.lstrip("0"))
    for ch in digits[taken:]:
        d = ord(ch) - 48
        if significand >= U64_MAX // 10 and (significand > U64_MAX // 10 or d > U64_MAX % 10):
            break
        significand = significand * 10 + d
        taken += 1
    return significand, taken


def _f64_from_parts(positive: bool, significand: int, exponent: int) -> float:
    # serde_json `Deserializer::f64_from_parts` (without the float_roundtrip feature), step for step.
    f = float(significand)
    while True:
        if abs(exponent) < len(_POW10):
            if exponent >= 0:
                f *= _POW10[exponent]
                if f == float("inf"):
                    raise HeaderJsonError("number out of range")
            else:
                f /= _POW10[-exponent]
            break
        if f == 0.0:
            break
        if exponent >= 0:
            raise HeaderJsonError("number out of range")
        f /= 1e308
        exponent += 308
    return f if positive else -f


def _exponent(positive: bool, significand: int, start: int, text: str) -> float:
    # `text` is what follows the `e`: an optional sign and at least one digit (the scanner checked the grammar).
    positive_exp = not text.startswith("-")
    digits = text.lstrip("+-").lstrip("0") or "0"
    exp, taken = 0, 0
    for ch in digits:
        d = ord(ch) - 48
        if exp >= I32_MAX // 10 and (exp > I32_MAX // 10 or d > I32_MAX % 10):
            break
        exp = exp * 10 + d
        taken += 1
    if taken < len(digits):  # serde_json `parse_exponent_overflow`: an error instead of infinity, else zero
        if significand != 0 and positive_exp:
            raise HeaderJsonError("number out of range")
        return 0.0 if positive else -0.0
    final = start + exp if positive_exp else start - exp
    final = max(min(final, I32_MAX), -I32_MAX - 1)  # i32 saturating arithmetic
    return _f64_from_parts(positive, significand, final)


def serde_number(token: str) -> int | float:
    """The value serde_json gives a JSON number token: an int for its u64 / i64 cases, a float for f64.

    `-0`, any fraction or exponent, and integers beyond the 64-bit ranges are floats (so never a `usize`); a
    magnitude past f64 raises `HeaderJsonError` like serde_json's "number out of range".
    """
    positive = not token.startswith("-")
    body = token if positive else token[1:]
    cut = len(body)
    for mark in (".", "e", "E"):
        at = body.find(mark)
        if at != -1 and at < cut:
            cut = at
    integer, rest = body[:cut], body[cut:]
    significand, taken = _accumulate(integer, 0)
    exponent = len(integer) - taken  # digits of a long integer past the u64 range only shift the exponent
    if not rest:
        if exponent:
            return _f64_from_parts(positive, significand, exponent)
        if positive:
            return significand
        if significand == 0 or significand > -I64_MIN:
            return -float(significand)  # serde_json: "convert into a float if we underflow, or on `-0`"
        return -significand
    if rest[0] == ".":
        end = len(rest)
        for mark in ("e", "E"):
            at = rest.find(mark)
            if at != -1:
                end = at
        fraction = rest[1:end]
        # Fraction digits join the significand until it would overflow; serde_json ignores the rest.
        significand, took = _accumulate(fraction, significand)
        exponent -= took
        rest = rest[end:]
    if rest:
        return _exponent(positive, significand, exponent, rest[1:])
    return _f64_from_parts(positive, significand, exponent)


_CONTAINERS = (dict, list)
_CONTAINER_TYPES = frozenset({dict, list, JObject})


def check_depth(value: Any, depth: int) -> None:
    """Raise if `value`, itself at nesting `depth`, holds a container at the reader's limit (128 levels).

    The header validator calls this on the only values a valid header may nest freely: fields the reader ignores.
    Everywhere else a container where a string or number belongs is rejected anyway."""
    if not isinstance(value, _CONTAINERS):
        return
    stack: list[tuple[Any, int]] = [(value, depth)]
    pop, push = stack.pop, stack.append
    while stack:
        value, depth = pop()
        if depth >= MAX_DEPTH:
            raise HeaderJsonError(f"nested {MAX_DEPTH} levels deep (the reader's limit)", too_deep=True)
        if type(value) is JObject:
            children: Any = [v for _, v in value.pairs]  # repeated keys' earlier values are parsed too
        elif isinstance(value, dict):
            children = value.values()
        else:
            children = value
        if _CONTAINER_TYPES.isdisjoint(map(type, children)):  # in C: a wide array of numbers costs little
            continue
        for child in children:
            if type(child) in _CONTAINER_TYPES:
                push((child, depth + 1))


NEG_ZERO = re.compile(rb"-0(?![0-9.eE])")  # `-0` as a whole token (or inside a string)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _serde_int(token: str) -> int | float:
    """An integer token as serde_json reads it; under 19 characters it is an i64 / u64 exactly as `int` reads it.
    Up to 300 characters (far inside f64's range) it is an int inside the u64 / i64 ranges and a finite float
    outside them, whose value no verdict reads (the reader takes no float anywhere): `int` in C, where
    `serde_number`'s digit-by-digit emulation made 80,000 twenty-digit dimensions cost seconds."""
    if len(token) < 19 and token != "-0":
        return int(token)
    if len(token) <= 300 and token != "-0":
        value = int(token)
        return value if I64_MIN <= value <= U64_MAX else float(value)
    return serde_number(token)


def _serde_float(token: str) -> int | float:
    """A fraction / exponent token as serde_json reads it; a short one without an exponent cannot leave f64's range,
    and only the range matters (the reader takes no float anywhere)."""
    if len(token) < 19 and "e" not in token and "E" not in token:
        return float(token)
    return serde_number(token)


def parse_exact(raw: bytes, text: str) -> Any:
    """Parse header text (`raw` decoded) as serde_json does, objects with a repeated key as `JObject`s. Raises
    `HeaderJsonError`.

    Nesting is the caller's to check where it matters (`check_depth`), except past the standard library's own
    recursion limit, which is far beyond the reader's and raises here.
    """
    repeated: list[JObject] = []

    def make_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        repeated_obj = JObject(obj)
        repeated_obj.pairs = pairs
        repeated.append(repeated_obj)
        return repeated_obj

    try:
        value = json.loads(
            text,
            object_pairs_hook=make_object,
            parse_int=_serde_int,
            parse_float=_serde_float,
            parse_constant=_constant,
        )
    except RecursionError:
        raise HeaderJsonError(f"nested {MAX_DEPTH} levels deep or more (the reader's limit)", too_deep=True) from None
    except json.JSONDecodeError as exc:
        raise HeaderJsonError(f"{exc.msg} at character {exc.pos}") from None
    if b"\\u" in raw and _SURROGATE_ESCAPE.search(raw):
        # The standard library keeps a lone surrogate escape as a lone code point; serde_json rejects it, and so
        # does orjson when asked to encode it (in C, over the whole tree and every repeated key's earlier value).
        try:
            orjson.dumps([value, [obj.pairs for obj in repeated]])
        except orjson.JSONEncodeError as exc:
            if "ecursion" in str(exc):  # orjson encodes 254 levels at most: far past the reader's limit
                raise HeaderJsonError(
                    f"nested {MAX_DEPTH} levels deep or more (the reader's limit)", too_deep=True
                ) from None
            if _lone_surrogate([value, [obj.pairs for obj in repeated]]):
                raise HeaderJsonError("a string holds a lone UTF-16 surrogate escape") from None
    return value


def _lone_surrogate(tree: Any) -> bool:
    """Whether a string of `tree` holds a lone surrogate, when orjson refused `tree` for another reason: an integer
    past 64 bits (below i64's minimum, which serde_json reads as a float) is no surrogate."""
    try:
        json.dumps(tree, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
