"""Build a `Checkpoint` from any `Source`: headers of every shard, the configs and the index (the value statistics of
the tensors that value rules judge come from `read.value_scan`, run beside the analysis by `read.background_scan`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import TypeVar

from ..errors import TargetError
from ..model.checkpoint import CONFIG_NAMES, INDEX_NAME, Checkpoint
from ..model.tensors import Index, LfsPointer, Problem, Shard
from .configs import read_config, read_index
from .header import ShardRead, read_shard
from .header_estimate import first_read_sizes
from .source import Source

SHARD_SUFFIX = ".safetensors"
T = TypeVar("T")
R = TypeVar("R")
V = TypeVar("V")
_LAST, _KIND = itemgetter(2), itemgetter(1, 2, 3)  # a name's `rpartition` suffix; TensorInfo dtype, shape, shard


def load_checkpoint(source: Source) -> Checkpoint:
    """Read headers and configs (never weight bytes). Raises `TargetError` when there is nothing to inspect."""
    names = list(source.list_files())
    sizes = {name: _size_or_zero(source, name) for name in names}
    shard_files = tuple(sorted(n for n in names if n.endswith(SHARD_SUFFIX)))

    # The index and the configs are independent small files: a remote source fetches them together.
    readers: dict[str, Callable[[Source, str], tuple[object, Problem | None]]] = {
        INDEX_NAME: read_index,
        **dict.fromkeys(CONFIG_NAMES, read_config),
    }
    present = [name for name in readers if name in sizes]
    loaded = dict(zip(present, _map(source, lambda name: readers[name](source, name), present), strict=True))
    problems: list[Problem] = [problem for _, problem in loaded.values() if problem]
    index = _loaded_value(loaded, INDEX_NAME, Index)
    if not shard_files and index is None:
        raise TargetError(f"{source.label}: no .safetensors file found")
    config = _loaded_value(loaded, "config.json", dict)
    hf_quant = _loaded_value(loaded, "hf_quant_config.json", dict)

    reads = _read_headers(source, shard_files, index, sizes)
    shards: list[Shard] = []
    pointers: list[LfsPointer] = []
    for result in reads:
        problems.extend(result.problems)
        if result.shard is not None:
            shards.append(result.shard)
        if result.lfs is not None:
            pointers.append(result.lfs)
    return Checkpoint(
        target=source.label,
        remote=source.is_remote,
        files=sizes,
        shard_files=shard_files,
        shards=tuple(shards),
        lfs_pointers=tuple(pointers),
        problems=tuple(problems),
        index=index,
        config=config,
        hf_quant_config=hf_quant,
    )


def _loaded_value(loaded: Mapping[str, tuple[object, Problem | None]], name: str, kind: type[V]) -> V | None:
    """The parsed file (an `Index`, a config dict) when it was present and valid, else None."""
    value = loaded.get(name, (None, None))[0]
    return value if isinstance(value, kind) else None


def _size_or_zero(source: Source, name: str) -> int:
    """A file that cannot be stat'ed (a broken symlink) counts as empty here; reading it reports why."""
    try:
        return source.size(name)
    except OSError:
        return 0


PROGRESS_SHARDS = 8  # remote header reads show a bar from this many shards on (on a terminal)


def _read_headers(source: Source, names: Iterable[str], index: Index | None, sizes: dict[str, int]) -> list[ShardRead]:
    names = list(names)
    if not source.is_remote:
        return [read_shard(source, n) for n in names]
    # Every read is a round trip: size the first read from the index so most shards cost one request, and read the
    # shards in parallel.
    first = first_read_sizes(index, names, sizes)
    from .progress import progress_bar

    disable = None if len(names) >= PROGRESS_SHARDS and not os.environ.get("CKPT_NO_PROGRESS") else True
    with progress_bar(total=len(names), unit="shard", desc="headers", disable=disable, leave=False) as bar:

        def one(name: str) -> ShardRead:
            result = read_shard(source, name, first[name])
            bar.update(1)
            return result

        return _map(source, one, names)


def _map(source: Source, fn: Callable[[T], R], items: list[T]) -> list[R]:
    """`fn` over `items`, in order; in threads when each call waits on network round trips."""
    if source.is_remote and len(items) > 1:
        from concurrent.futures import ThreadPoolExecutor  # (and logging): only a remote source needs threads

        with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
            return list(pool.map(fn, items))
    return [fn(item) for item in items]
