"""The streaming value scan: read the wanted tensors' byte ranges and turn them into `TensorStats`, in bounded memory.

Per shard, the wanted tensors' ranges are coalesced (through gaps smaller than the gap limit) and cut into reads of
at most `chunk` bytes, on element boundaries; a tensor may span many reads and a read many tensors, and each piece
is fed to its tensor's accumulator in order, so statistics are exact whatever the cut. At most one read per worker
is held at a time (plus the pieces cut from it): memory is a few `chunk`s per worker, whatever the checkpoint size.

Local files are read with `os.pread` and `posix_fadvise`: SEQUENTIAL where the wanted bytes are dense (safetensors
writers group tensors by dtype, so a shard's 8-bit block scales are usually one contiguous region), RANDOM where they
are scattered (so the kernel's readahead does not pull in the weights between them), WILLNEED on the next
`PREFETCH` bytes of reads so the disk works while the current one is measured, and DONTNEED once a read is consumed
so the scan does not fill the page cache (which container memory limits count). Any other `Source` (the Hub, with
`--deep`) is read through `Source.read_ranges`, one ranged request per read, shards in parallel threads.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import compress, groupby, islice, repeat
from operator import itemgetter, le
from types import MappingProxyType
from typing import Any, TypeVar, cast

from ..errors import TargetError
from ..model.tensors import Shard, TensorInfo
from ..model.values import (
    FLOAT8_DTYPES,
    ITEM_SIZE,
    SMALL_TENSOR_ELEMENTS,
    STATS_DTYPES,
    TensorStats,
    ValueStats,
    channel_layout,
    value_dtype,
)
from .source import Source
from .value_measure import Accumulator, all_plain, all_zero, small_stats

CHUNK = 8 * 1024 * 1024  # bytes per read: large sequential reads, a bounded buffer
PREFETCH = 2 * CHUNK  # bytes asked of the disk ahead of the read being measured (page cache, not memory we hold)
LOCAL_GAP = 64 * 1024  # read through smaller gaps between wanted ranges rather than issue another read
REMOTE_GAP = 256 * 1024  # a round trip costs more than this many bytes
DENSE = 0.5  # wanted bytes / bytes spanned above which a shard is read as one sequential stream
LOCAL_WORKERS = 2  # shards in parallel: one worker measures while the other waits on the disk
REMOTE_WORKERS = 16
RESIDENCY_WINDOW = 1 << 30  # bytes of file whose page residency is taken at once (a 256 KiB page map)
PROGRESS_THRESHOLD = 64 * 1024 * 1024  # show a progress bar (on a terminal) from this many bytes on


class ScanCancelled(Exception):
    """The scan was asked to stop (`cancel` set): the analysis it was feeding ended first (an error, Ctrl-C)."""


@dataclass(frozen=True)
class Read:
    """One read of a shard: `length` bytes from file offset `start`, and the tensor pieces in it as
    (tensor index in the plan, offset in the read, length)."""

    start: int
    length: int
    pieces: tuple[tuple[int, int, int], ...]


@dataclass(frozen=True)
class ShardPlan:
    shard: str
    tensors: tuple[TensorInfo, ...]
    reads: tuple[Read, ...]
    kinds: tuple[_Kind, ...] | None = None  # per tensor, when the planner had them (`_kinds`); else worked out
    order: tuple[int, ...] | None = None  # plan index -> index in the tensors as given, when they were out of order

    @property
    def dense(self) -> bool:
        if not self.reads:
            return False
        spanned = self.reads[-1].start + self.reads[-1].length - self.reads[0].start
        wanted = sum(map(_END, self.tensors)) - sum(map(_BEGIN, self.tensors))
        return wanted >= DENSE * spanned


def plan_shard(
    shard: Shard,
    tensors: Iterable[TensorInfo],
    *,
    chunk: int = CHUNK,
    gap: int = LOCAL_GAP,
    kinds: Sequence[_Kind] | None = None,
) -> ShardPlan:
    """Cut the tensors' ranges (file offsets) into reads of at most `chunk` bytes, coalescing gaps up to `gap`.
    `kinds`: each tensor's `_Kind`, in the order of `tensors`, kept in the plan in file order."""
    listed = list(tensors)
    begins = list(map(_BEGIN, listed))
    order: list[int] | None = None
    if all(map(le, begins, islice(begins, 1, None))):  # in file order already: a shard's tensors in header order
        ordered, in_order = tuple(listed), kinds
    else:  # a stable sort by offset, as `sorted(tensors, key=begin)` orders them
        order = sorted(range(len(listed)), key=begins.__getitem__)
        ordered = tuple(map(listed.__getitem__, order))
        begins = list(map(begins.__getitem__, order))
        in_order = None if kinds is None else list(map(kinds.__getitem__, order))
    reads: list[Read] = []
    start = end = -1  # the read being built: file offsets [start, end)
    pieces: list[tuple[int, int, int]] = []
    base = shard.data_start
    whole = chunk - chunk % 4  # every item size divides this: a tensor that fits needs no element arithmetic
    for index, (begin, finish) in enumerate(zip(begins, map(_END, ordered), strict=True)):
        pos, stop = base + begin, base + finish
        if pieces and pos - end <= gap and stop - start <= whole:  # the common case: it joins the read whole
            pieces.append((index, pos - start, stop - pos))
            end = stop
            continue
        item = ITEM_SIZE.get(value_dtype(ordered[index]), 1)
        while pos < stop:  # an empty tensor needs no read: its accumulator reports zero elements
            room = chunk - (pos - start) if pieces and pos - end <= gap else 0
            take = min(stop - pos, room - room % item)
            if take <= 0:
                if pieces:
                    reads.append(Read(start, end - start, tuple(pieces)))
                    pieces = []
                start = end = pos
                take = min(stop - pos, max(chunk - chunk % item, item))
            pieces.append((index, pos - start, take))
            pos += take
            end = pos
    if pieces:
        reads.append(Read(start, end - start, tuple(pieces)))
    return ShardPlan(
        shard.name,
        ordered,
        tuple(reads),
        None if in_order is None else tuple(in_order),
        None if order is None else tuple(order),
    )


class _LocalReader:
    """pread with fadvise hints, on one file descriptor per shard. Hints are advice: a file system that refuses them
    (EINVAL, ESPIPE) is read without. A read whose pages were all in the page cache before the scan touched them
    (`ckpt_tools.read.residency`) gets no hint at all: it costs no disk, and dropping it would evict bytes someone had
    cached (the checkpoint just written, the last run's scan, a server's load); only what the scan brings in is
    dropped. Residency is taken per window of reads spanning at most `RESIDENCY_WINDOW` bytes (one page-map byte per
    4 KiB: bounded memory however far apart a hostile header puts its tensors), each just before the first hint or
    read of the window."""

    def __init__(self, path: str, plan: ShardPlan) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.advise = hasattr(os, "posix_fadvise")  # not on macOS / Windows
        self.cached: set[int] = set()  # starts of the reads found cached so far
        self._windows: list[tuple[int, int, int]] = []  # (first read, end read, span end) per window, in file order
        self._next = 0  # windows[:_next] were measured
        self._reads = plan.reads
        if self.advise:
            self._hint(0, 0, os.POSIX_FADV_SEQUENTIAL if plan.dense else os.POSIX_FADV_RANDOM)
        if self.advise and plan.reads:
            first = 0
            for i, r in enumerate(plan.reads):
                if r.start + r.length - plan.reads[first].start > RESIDENCY_WINDOW and i > first:
                    self._windows.append((first, i, plan.reads[i - 1].start + plan.reads[i - 1].length))
                    first = i
            last = plan.reads[-1]
            self._windows.append((first, len(plan.reads), last.start + last.length))

    def _measure(self, read: Read) -> None:
        """Take the residency of every window up to the one holding `read` that is not measured yet."""
        from .residency import Residency

        reads = self._reads
        while self._next < len(self._windows) and reads[self._windows[self._next][0]].start <= read.start:
            i, j, end = self._windows[self._next]
            cached = Residency(self.fd, reads[i].start, end).cached
            self.cached.update(r.start for r in reads[i:j] if cached(r.start, r.start + r.length))
            self._next += 1

    def _hint(self, start: int, length: int, advice: int) -> None:
        try:
            os.posix_fadvise(self.fd, start, length, advice)
        except OSError:
            self.advise = False

    def prefetch(self, read: Read) -> None:
        if self.advise:
            self._measure(read)
            if read.start not in self.cached:
                self._hint(read.start, read.length, os.POSIX_FADV_WILLNEED)

    def read(self, read: Read) -> bytes:
        if self.advise:
            self._measure(read)
        return os.pread(self.fd, read.length, read.start)

    def read_into(self, read: Read, buffer: memoryview) -> memoryview:
        """`read` into `buffer` (at least `read.length` bytes), reused read after read: no fresh pages to fault in
        per read. Returns the part read."""
        if self.advise:
            self._measure(read)
        return buffer[: os.preadv(self.fd, [buffer[: read.length]], read.start)]

    def done(self, read: Read) -> None:
        if self.advise and read.start not in self.cached:
            self._hint(read.start, read.length, os.POSIX_FADV_DONTNEED)

    def close(self) -> None:
        os.close(self.fd)


class _MappedReader(_LocalReader):
    """`_LocalReader` whose reads of cached pages are mappings of the file (`MAP_POPULATE`: mapped in one call)
    instead of copies into a buffer: the measuring reads the page cache itself, which saves a copy of every scanned
    byte (docs/performance.md). A read whose pages were not all cached before the scan
    (`_LocalReader.cached`) is read with `preadv` as before: paging in through a mapping is slower from a cold cache
    than `preadv` with the kernel's readahead, and the copy is cheap next to the disk.

    Only for a scan in a process of its own (`read.background_scan`): a file truncated after its size was taken
    turns the next touch of a mapped page into SIGBUS, which kills the process instead of raising. The forked scan
    then dies by that signal and its parent reads the checkpoint again without mappings, which reports the short file
    as any scan does. A read that runs past the file's end as it is now is read as `_LocalReader` reads it."""

    _map: mmap.mmap | None = None

    def read_into(self, read: Read, buffer: memoryview) -> memoryview:
        if self.advise:
            self._measure(read)
        base = read.start - read.start % mmap.ALLOCATIONGRANULARITY  # mmap offsets are multiples of this
        end = read.start + read.length
        if read.start not in self.cached or end > os.fstat(self.fd).st_size:
            return super().read_into(read, buffer)  # from the disk, or a short file (for `_complete` to report)
        try:
            self._map = map_range(self.fd, base, end - base)
        except (ValueError, OSError):
            # ValueError: it shrank since (Python checks the length against the file's size itself); OSError: a file
            # system that cannot map files (ENODEV). Either way it is read as the unmapped scan reads it.
            return super().read_into(read, buffer)
        return memoryview(self._map)[read.start - base :]

    def done(self, read: Read) -> None:
        self._release()
        super().done(read)  # after the unmapping: the kernel keeps the pages a mapping still holds

    def close(self) -> None:
        self._release()
        super().close()

    def _release(self) -> None:
        mapping, self._map = self._map, None
        if mapping is not None:
            with contextlib.suppress(BufferError):  # a view still held: the mapping goes with its last reference
                mapping.close()


_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


def map_range(fd: int, offset: int, length: int) -> mmap.mmap:
    """A read-only mapping of `length` bytes of `fd` from `offset` (a multiple of the allocation granularity), its
    pages mapped at once (`MAP_POPULATE`) rather than one fault per page."""
    return mmap.mmap(fd, length, flags=_MAP_FLAGS, prot=mmap.PROT_READ, offset=offset)


class _SourceReader:
    """Any `Source` (the Hub): one `read_ranges` call per read."""

    def __init__(self, source: Source, name: str) -> None:
        self.source, self.name = source, name

    def prefetch(self, read: Read) -> None:
        pass

    def read(self, read: Read) -> bytes:
        return self.source.read_ranges(self.name, [(read.start, read.length)])[0]

    def read_into(self, read: Read, buffer: memoryview) -> memoryview:
        return memoryview(self.read(read))

    def done(self, read: Read) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class ScanCounters:
    """What a scan cost, for benchmarks and tests: bytes fetched, reads issued, the largest read."""

    bytes_read: int = 0
    reads: int = 0
    largest_read: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, n: int, reads: int = 1, largest: int | None = None) -> None:
        """`reads` reads of `n` bytes in all, the largest `largest` bytes (default: `n`)."""
        with self._lock:
            self.bytes_read += n
            self.reads += reads
            self.largest_read = max(self.largest_read, n if largest is None else largest)


def open_reader(source: Source, plan: ShardPlan, *, mapped: bool = False) -> _LocalReader | _SourceReader:
    """The reader for one shard: pread + fadvise on a local file (mappings instead of pread with `mapped`, in a scan
    process of its own only: `_MappedReader`), `read_ranges` on any other source."""
    local_path = getattr(source, "path", None) if not source.is_remote else None
    if local_path is not None:
        return (_MappedReader if mapped else _LocalReader)(str(local_path(plan.shard)), plan)
    return _SourceReader(source, plan.shard)


def read_pieces(
    source: Source,
    shard: Shard,
    tensors: Iterable[TensorInfo],
    *,
    chunk: int = CHUNK,
    counters: ScanCounters | None = None,
) -> Iterator[tuple[TensorInfo, int, bytes]]:
    """(tensor, offset in its data, bytes) for the tensors' bytes, in file order, at most `chunk` bytes held at a time:
    for repairs that need positions (scrub-nan), not statistics."""
    plan = plan_shard(shard, tensors, chunk=chunk, gap=REMOTE_GAP if source.is_remote else LOCAL_GAP)
    reader = open_reader(source, plan)
    try:
        for read in plan.reads:
            blob = _fetch(reader, read, counters)
            for index, offset, length in read.pieces:
                t = plan.tensors[index]
                yield t, read.start + offset - (shard.data_start + t.begin), blob[offset : offset + length]
            reader.done(read)
    finally:
        reader.close()


def _fetch(reader: _LocalReader | _SourceReader, read: Read, counters: ScanCounters | None) -> bytes:
    blob = reader.read(read)
    if counters is not None:
        counters.add(len(blob))
    return _complete(read, blob)


_Data = TypeVar("_Data", bytes, memoryview)


def _complete(read: Read, data: _Data) -> _Data:
    """`data` when it holds all of `read`; an OSError when the file ended first (it changed since its header was
    read, or the header lists tensors past its end)."""
    if len(data) < read.length:
        raise OSError(f"the file ended {read.length - len(data)} bytes before the tensors its header lists")
    return data


def scan_shard(
    plan: ShardPlan,
    reader: _LocalReader | _SourceReader,
    counters: ScanCounters,
    progress: Callable[[int], object] | None = None,
    cancel: threading.Event | None = None,
) -> list[TensorStats]:
    """The statistics of one shard's planned tensors, in plan order; `ScanCancelled` at the next read once `cancel`
    is set."""
    tensors = plan.tensors
    kinds = plan.kinds if plan.kinds is not None else _kinds(tensors)
    # Per tensor: None until its first piece, then its Accumulator, or at once its statistics when that piece is the
    # whole tensor (most tensors a scan measures: global and input scales, and block scales that fit one read).
    accs: list[Accumulator | TensorStats | None] = [None] * len(tensors)
    # A tensor read whole in one piece has statistics that are a function of (format, layout, element count, bytes)
    # alone: small tensors', all-zero and all-plain pieces' results are shared, not recomputed (stats are immutable).
    small: dict[tuple[str, bytes], TensorStats] = {}
    zero_whole: dict[_Kind, TensorStats] = {}
    plain_whole: dict[_Kind, TensorStats] = {}
    buffer = memoryview(bytearray(max((r.length for r in plan.reads), default=0)))
    reads = plan.reads
    ahead = pending = 0  # reads[:ahead] were asked for; `pending` bytes of them lie beyond the current read
    fetched = largest = 0
    try:
        for i, read in enumerate(reads):
            if cancel is not None and cancel.is_set():
                raise ScanCancelled
            if ahead <= i:
                reader.prefetch(read)
                ahead = i + 1
            else:
                pending -= read.length
            while ahead < len(reads) and pending < PREFETCH:
                reader.prefetch(reads[ahead])
                pending += reads[ahead].length
                ahead += 1
            view = _complete(read, reader.read_into(read, buffer))
            fetched += len(view)
            largest = max(largest, len(view))
            codes = _one_float8_run(read, kinds)
            if codes is not None and all_zero(view):  # holes of sparse files, zero-filled exports: no copy, no pass
                _feed_uniform_read(read, kinds, accs, zero_whole, _feed_zeros)
            elif codes is not None and all_plain(codes, view):
                _feed_uniform_read(read, kinds, accs, plain_whole, Accumulator.feed_plain)
            else:
                _feed_read(read, bytes(view), kinds, accs, small, zero_whole)
            del view
            reader.done(read)
            if progress is not None:
                progress(read.length)
    finally:
        reader.close()
    counters.add(fetched, len(reads), largest)
    for i, acc in enumerate(accs):  # most are measured already (`TensorStats`): a type test each
        if acc.__class__ is not TensorStats:
            kind = kinds[i]
            # None: an empty tensor, which no piece fed
            accs[i] = (Accumulator(kind[0], kind[2], kind[1]) if acc is None else acc).result()  # type: ignore[union-attr]
    return cast("list[TensorStats]", accs)


_Accs = list[Accumulator | TensorStats | None]


def _one_float8_run(read: Read, kinds: Sequence[_Kind]) -> str | None:
    """The 8-bit float format of a read made only of pieces of tensors in that one format, end to end (no gap bytes),
    none of them small (small tensors keep their values): such a read is measured whole, in one vector pass (a
    shard's block scales lie side by side, as the safetensors writer groups tensors by dtype). Else None."""
    first = kinds[read.pieces[0][0]][0]
    if first not in FLOAT8_DTYPES:
        return None
    covered = 0
    for index, _offset, length in read.pieces:
        dtype, _layout, numel, _nbytes = kinds[index]
        if dtype != first or numel <= SMALL_TENSOR_ELEMENTS:
            return None
        covered += length
    return first if covered == read.length else None


def _feed_uniform_read(
    read: Read,
    kinds: Sequence[_Kind],
    accs: _Accs,
    shared: dict[_Kind, TensorStats],
    feed: Callable[[Accumulator, int], None],
) -> None:
    """Measure a read of 8-bit codes known to be all of one sort (`_one_float8_run`, then `all_zero` or `all_plain`)
    without looking at them again: a whole tensor's statistics then depend on its kind alone, so one result per kind
    (`shared`) serves every such tensor; `feed(accumulator, n)` counts `n` codes of that sort, for a tensor that
    straddles reads and for the first whole tensor of each kind."""
    for index, _offset, length in read.pieces:
        acc = accs[index]
        if acc is None:
            kind = kinds[index]
            dtype, layout, numel, nbytes = kind
            if length == nbytes:
                stats = shared.get(kind)
                if stats is None:
                    whole = Accumulator(dtype, numel, layout)
                    feed(whole, length)
                    stats = shared[kind] = whole.result()
                accs[index] = stats
                continue
            acc = accs[index] = Accumulator(dtype, numel, layout)
        assert isinstance(acc, Accumulator)
        feed(acc, length)


def _feed_zeros(acc: Accumulator, n: int) -> None:
    acc.feed(bytes(n))


def _feed_read(
    read: Read,
    blob: bytes,
    kinds: Sequence[_Kind],
    accs: _Accs,
    small: dict[tuple[str, bytes], TensorStats],
    zero_whole: dict[_Kind, TensorStats],
) -> None:
    """Measure a read piece by piece."""
    for index, offset, length in read.pieces:
        acc = accs[index]
        if acc is None:
            kind = kinds[index]
            dtype, layout, numel, nbytes = kind
            if length == nbytes:  # the whole tensor in this piece: measured on the spot
                piece = blob[offset : offset + length] if length != len(blob) else blob
                if layout is None and numel <= SMALL_TENSOR_ELEMENTS:
                    key = (dtype, piece)
                    stats = small.get(key)
                    if stats is None:
                        stats = small[key] = small_stats(dtype, piece)
                    accs[index] = stats
                elif all_zero(piece):
                    stats = zero_whole.get(kind)
                    if stats is None:
                        stats = zero_whole[kind] = _whole(dtype, numel, layout, piece)
                    accs[index] = stats
                else:
                    accs[index] = _whole(dtype, numel, layout, piece)
                continue
            acc = accs[index] = Accumulator(dtype, numel, layout)
        assert isinstance(acc, Accumulator)
        acc.feed(blob[offset : offset + length] if length != len(blob) else blob)


_Kind = tuple[str, tuple[str, int] | None, int, int]  # value dtype, channel layout, elements, bytes
# TensorInfo fields (name, dtype, shape, shard, begin, end)
_NAME, _DTYPE, _SHAPE, _SHARD, _BEGIN, _END = (itemgetter(i) for i in range(6))
_LAST = itemgetter(2)  # of a str.rpartition


def _by_shard(
    tensors: Sequence[TensorInfo], wanted: Callable[[TensorInfo], bool] | None, shards: Container[str]
) -> dict[str, tuple[list[TensorInfo], list[_Kind], list[int]]]:
    """Shard -> (its measured tensors, their `_Kind`s, their positions in `tensors`), shards in first-seen order,
    tensors in the given order: the tensors in a `STATS_DTYPES` format, and with `wanted`, only those it accepts in
    `shards`. In whole-list steps: each (dtype, suffix, shape) is judged once, on its first tensor; the answers are
    matched in C, and a checkpoint's tensors come shard by shard, so the grouping goes run by run."""
    kinds = _judged(tensors, lambda t: _kind(t) if _measured(t, wanted) else None)
    groups: dict[str, tuple[list[TensorInfo], list[_Kind], list[int]]] = {}
    start = 0
    for name, run in groupby(map(_SHARD, tensors)):
        stop = start + len(list(run))
        ts, ks, at = tensors[start:stop], kinds[start:stop], range(start, stop)
        start = stop
        if wanted is not None and name not in shards:
            continue
        if None in ks:  # a `_Kind` is a non-empty tuple: only the unmeasured are false
            ts, at, ks = list(compress(ts, ks)), compress(at, ks), list(filter(None, ks))  # type: ignore[assignment]
        if not ts:
            continue
        group = groups.setdefault(name, ([], [], []))  # a shard met again further on: its tensors after the others
        group[0].extend(ts)
        group[1].extend(cast("list[_Kind]", ks))
        group[2].extend(at)
    return groups


def _measured(t: TensorInfo, wanted: Callable[[TensorInfo], bool] | None) -> bool:
    return value_dtype(t) in STATS_DTYPES and (wanted is None or wanted(t))


def _kind(t: TensorInfo) -> _Kind:
    return (value_dtype(t), channel_layout(t), t.numel, t.end - t.begin)


def _kinds(tensors: Sequence[TensorInfo]) -> list[_Kind]:
    """What measuring each tensor depends on besides its bytes (`_judged`: all that `value_dtype` and
    `channel_layout` read, and the element and byte counts they fix, come from its dtype, suffix and shape)."""
    return cast("list[_Kind]", _judged(tensors, _kind))


def _judged(tensors: Sequence[TensorInfo], judge: Callable[[TensorInfo], _Kind | None]) -> list[_Kind | None]:
    """Per tensor, `judge` of the first tensor with its dtype, last name segment and shape (`judge` must answer from
    those alone): a checkpoint has a few hundred such triples, each judged once; the rest is lookups in C."""
    suffixes = map(_LAST, map(str.rpartition, map(_NAME, tensors), repeat(".")))
    keys = list(zip(map(_DTYPE, tensors), suffixes, map(_SHAPE, tensors), strict=True))
    first = dict(zip(reversed(keys), reversed(tensors), strict=True))  # each triple -> its first tensor
    known = {k: judge(t) for k, t in first.items()}
    return list(map(known.__getitem__, keys))


def _whole(dtype: str, numel: int, layout: tuple[str, int] | None, piece: bytes) -> TensorStats:
    acc = Accumulator(dtype, numel, layout)
    acc.feed(piece)
    return acc.result()


def _progress_bar(total: int) -> Any:
    """A tqdm bar for the scan, made only when it is shown."""
    from .progress import progress_bar

    return progress_bar(total=total, unit="B", unit_scale=True, desc="value scan", leave=False)


@dataclass(frozen=True)
class ScanColumns:
    """A scan's statistics as columns: per measured tensor, its position in the tensors the scan was given and its
    statistics (equal results are often one shared object), shard by shard in plan order; and the bytes fetched."""

    positions: list[int]
    stats: list[TensorStats]
    bytes_read: int


def scan_values(
    source: Source,
    tensors: Sequence[TensorInfo],
    shards: Mapping[str, Shard],
    **kw: Any,
) -> ValueStats:
    """`scan_columns` as a mapping: tensor name -> statistics, in the scan's order."""
    listed = tensors if isinstance(tensors, list) else list(tensors)
    columns = scan_columns(source, listed, shards, **kw)
    names = map(_NAME, map(listed.__getitem__, columns.positions))
    return ValueStats(MappingProxyType(dict(zip(names, columns.stats, strict=True))), bytes_read=columns.bytes_read)


def scan_columns(
    source: Source,
    tensors: Sequence[TensorInfo],
    shards: Mapping[str, Shard],
    *,
    chunk: int = CHUNK,
    workers: int | None = None,
    progress: bool | None = None,
    counters: ScanCounters | None = None,
    cancel: threading.Event | None = None,
    mapped: bool = False,
    wanted: Callable[[TensorInfo], bool] | None = None,
) -> ScanColumns:
    """Measure `tensors` (those in a dtype of `STATS_DTYPES`, each in a valid shard of `shards`). Exact statistics; each
    worker holds one read and the pieces cut from it (a few `chunk`s at most). A shard that cannot be read (it
    changed or vanished since its header was read) is a `TargetError`. Once `cancel` is set, every worker stops at
    its next read and the scan raises `ScanCancelled`. `mapped`: read local files through mappings, which only a
    process that may die of SIGBUS can do (`_MappedReader`). `wanted`: measure only the tensors it accepts, and only
    those in `shards` (an invalid shard is left out of it: its offsets cannot be trusted), so that a whole
    checkpoint's tensors can be passed as they are; it must answer from a tensor's dtype, shape and suffix alone, as
    `Rule.wants_values` does (it is asked once per such kind)."""
    counters = counters if counters is not None else ScanCounters()
    stop = cancel if cancel is not None else threading.Event()
    gap = REMOTE_GAP if source.is_remote else LOCAL_GAP
    plans: list[ShardPlan] = []
    positions: list[int] = []
    for name, (ts, ks, at) in _by_shard(tensors, wanted, shards).items():
        plan = plan_shard(shards[name], ts, chunk=chunk, gap=gap, kinds=ks)
        plans.append(plan)
        positions.extend(at if plan.order is None else map(at.__getitem__, plan.order))
    total = sum(r.length for p in plans for r in p.reads)
    if workers is None:
        workers = REMOTE_WORKERS if source.is_remote else LOCAL_WORKERS
    workers = max(1, min(workers, len(plans)))

    disable = (total < PROGRESS_THRESHOLD) if progress is None else not progress
    if os.environ.get("CKPT_NO_PROGRESS"):
        disable = True
    with contextlib.ExitStack() as stack:
        update: Callable[[int], object] | None = None
        if not disable:
            update = stack.enter_context(_progress_bar(total)).update

        def one(plan: ShardPlan) -> list[TensorStats]:
            try:
                return scan_shard(plan, open_reader(source, plan, mapped=mapped), counters, update, stop)
            except OSError as exc:
                raise TargetError(
                    f"{source.label}: cannot read the scale values of {plan.shard} ({exc.strerror or exc})"
                ) from None

        if workers == 1:
            results = [one(plan) for plan in plans]
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                try:
                    results = list(pool.map(one, plans))
                except BaseException:  # a shard failed, or Ctrl-C: the other workers stop at their next read
                    stop.set()
                    raise
    stats: list[TensorStats] = []
    for part in results:  # in plan order, whatever order the reads finished in
        stats.extend(part)
    return ScanColumns(positions, stats, counters.bytes_read)
