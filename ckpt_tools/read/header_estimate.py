"""How many bytes to fetch first for a shard header when every read costs a network round trip.

A safetensors header is `"name":{"dtype":"D","shape":[..],"data_offsets":[b,e]},` per tensor, so the index (tensor
name -> shard) bounds each shard's header length closely before a single shard byte is read: the name lengths are
known, the dtype is at most 7 characters for every common dtype, and the shape and offset digits are bounded by the
file size. One speculative read of that bound usually fetches the whole header in one request, at about 1.1x its
size. A shard the index does not describe gets a small probe, after which the header reader fetches exactly the rest.
The estimate only decides how many requests and bytes a read costs; the verdict never depends on it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

import orjson

from ..model.tensors import Index

PROBE = 1024  # covers a Git LFS pointer file whole, and the 8-byte length of any header
ENTRY_FIXED = len('"":{"dtype":"","shape":[],"data_offsets":[,]},')
DTYPE_CHARS = 7  # F8_E4M3, F8_E8M0, F6_E2M3; longer dtypes (F8_E4M3FNUZ) just cost a second request
SHAPE_EXTRA = 4  # up to three dimensions: two commas and two extra digits over the digits of the element count
METADATA_ALLOWANCE = 96  # "__metadata__":{"format":"pt"} (30 bytes) with room for a little more
FRAME = 8 + 2 + 7  # length prefix, braces, up to 7 bytes of alignment padding


def _names_json_len(names: list[str]) -> int:
    """Bytes the names take as JSON strings, quotes included (a fast path for the usual plain ASCII names)."""
    joined = "".join(names)
    if joined.isascii() and '"' not in joined and "\\" not in joined:
        return len(joined) + 2 * len(names)
    return sum(len(orjson.dumps(n)) for n in names)


def estimate_header_read(tensor_names: Iterable[str], file_size: int) -> int:
    """An upper-end estimate of 8 + the header length of a shard holding `tensor_names`, in bytes."""
    names = list(tensor_names)
    offset_digits = len(str(file_size))
    # numel <= 2 x bytes (4-bit dtypes); the shape's digits are at most those of numel plus one per extra dimension.
    shape_chars = len(str(2 * file_size)) + SHAPE_EXTRA
    per_entry = ENTRY_FIXED - 2 + DTYPE_CHARS + shape_chars + 2 * offset_digits
    return FRAME + METADATA_ALLOWANCE + _names_json_len(names) + per_entry * len(names)


def first_read_sizes(index: Index | None, shards: Iterable[str], sizes: Mapping[str, int]) -> dict[str, int]:
    """Bytes to read first for each shard: the estimate from the index, or a probe for shards it does not list."""
    by_shard: dict[str, list[str]] = defaultdict(list)
    if index is not None:
        for tensor, shard in index.weight_map.items():
            by_shard[shard].append(tensor)
    out: dict[str, int] = {}
    for shard in shards:
        size = sizes.get(shard, 0)
        names = by_shard.get(shard)
        # An indexed estimate is never below ~170 bytes, so a Git LFS pointer (~130 bytes) still comes whole.
        out[shard] = min(size, estimate_header_read(names, size) if names else PROBE)
    return out
