"""The value scan, run beside the header analysis: started as soon as the headers are read, waited for only by the
value rules, so detection and the header rules use the other core meanwhile.

Where it is safe, the scan runs in a forked child process: a thread of this process would share its GIL, and the
scan's short Python steps between reads would then queue behind the analysis (each wait up to the interpreter's
switch interval), which measured no faster than scanning first. A fork costs a few milliseconds, shares the parsed
headers copy-on-write and sends back only the statistics (never pickled: no module of ckpt can load one): each
distinct statistics object once, as JSON (the scan shares one object among equal results), then per tensor, in the
order the scan produced them, its position among the loaded tensors and the index of its statistics, as arrays.

The fork is used on Linux for a local checkpoint when this process runs no other thread (forking a threaded
process can leave the child with a lock another thread held). Otherwise (a Hub `--deep` scan, whose HTTP
connections must not be shared with a child; an embedding program with threads of its own; macOS, whose system
libraries are not fork-safe; Windows) the scan runs in a thread. Either way the statistics are the same objects
the scan built, in the same order, and errors surface as they do in-process: a shard that cannot be read is the
scan's own `TargetError`, raised when the value rules ask for the values.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import struct
import sys
import threading
from array import array
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .. import errors

if TYPE_CHECKING:
    from ..model.checkpoint import Checkpoint
    from ..model.tensors import Shard, TensorInfo
    from ..model.values import ValueStats
    from .source import Source
    from .value_scan import ScanColumns


class BackgroundScan:
    """The value statistics of the tensors of `ckpt` that `wanted` accepts (in valid shards), being measured from
    construction on; `result()` waits for them, `close()` stops the scan if it still runs (the analysis ended first:
    an error, Ctrl-C) and releases what it holds. A forked child also chooses the tensors itself, so this process
    goes on with its analysis at once."""

    def __init__(
        self, source: Source, ckpt: Checkpoint, wanted: Callable[[TensorInfo], bool], *, progress: bool | None = None
    ) -> None:
        self._runner: _Forked | _Threaded
        if forkable(source):
            self._runner = _Forked(source, ckpt, wanted, progress)
        else:
            self._runner = _Threaded(source, ckpt, wanted, progress)

    @property
    def forked(self) -> bool:
        return isinstance(self._runner, _Forked)

    def result(self) -> ValueStats:
        return self._runner.result()

    def close(self) -> None:
        self._runner.close()


def forkable(source: Source) -> bool:
    """Whether the scan of `source` may run in a forked child (see the module docstring)."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and not source.is_remote
        and threading.active_count() == 1
        and not os.environ.get("CKPT_SCAN_IN_THREAD")
    )


def _plan_and_scan(source: Source, ckpt: Checkpoint, wanted: Callable[[TensorInfo], bool], **kw: Any) -> ValueStats:
    """The statistics of the loaded tensors (`ckpt.tensors`) that `wanted` accepts, in valid shards only (an invalid
    shard's offsets cannot be trusted), in load order; the scan picks them in its own pass (`scan_values(wanted=)`)."""
    from .value_scan import scan_values  # a header-only analysis never loads the scanner

    return scan_values(source, list(ckpt.tensors.values()), _valid_shards(ckpt), wanted=wanted, **kw)


def _scan_columns(source: Source, ckpt: Checkpoint, wanted: Callable[[TensorInfo], bool], **kw: Any) -> ScanColumns:
    """`_plan_and_scan` as columns: positions among `ckpt.tensors`, which the child sends as they are."""
    from .value_scan import scan_columns

    return scan_columns(source, list(ckpt.tensors.values()), _valid_shards(ckpt), wanted=wanted, **kw)


def _valid_shards(ckpt: Checkpoint) -> dict[str, Shard]:
    return {s.name: s for s in ckpt.shards if s.valid}


class _Threaded:
    def __init__(
        self, source: Source, ckpt: Checkpoint, wanted: Callable[[TensorInfo], bool], progress: bool | None
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        # The tensor map is built in the caller's thread: the checkpoint's lazily built views are then built once,
        # not raced for by the scan and the header analysis.
        ckpt.tensors  # noqa: B018
        self._cancel = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-value-scan")
        self._future = self._pool.submit(_plan_and_scan, source, ckpt, wanted, progress=progress, cancel=self._cancel)

    def result(self) -> ValueStats:
        return self._future.result()

    def close(self) -> None:
        self._cancel.set()  # the workers stop at their next read
        self._pool.shutdown(wait=True)


class _Forked:
    def __init__(
        self, source: Source, ckpt: Checkpoint, wanted: Callable[[TensorInfo], bool], progress: bool | None
    ) -> None:
        self._ckpt = ckpt
        self._again = (source, wanted, progress)  # to scan in this process if the child dies of SIGBUS
        self._value: ValueStats | None = None
        self._status = 0  # how the child ended (`os.waitpid`), once reaped
        # The tensor map, which the child needs to choose what to read and this process needs for its analysis, is
        # built once, here, before the fork: the child then starts reading at once.
        ckpt.tensors  # noqa: B018
        read, write = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # what this process has buffered is written once, by this process
            if stream is not None:  # None: started with the stream closed
                with contextlib.suppress(OSError, ValueError):  # a broken pipe, a closed file: the parent's to meet
                    stream.flush()
        self._pid: int | None = os.fork()
        if self._pid == 0:  # the child: scan, send, and leave without running anything of the parent's
            os.close(read)
            _child(write, source, ckpt, wanted, progress)
        os.close(write)
        self._pipe: int | None = read

    def result(self) -> ValueStats:
        if self._value is not None:
            return self._value
        from ..model.values import TensorStats, ValueStats

        assert self._pipe is not None
        every = list(self._ckpt.tensors)  # before the wait, which this process would otherwise spend idle
        with os.fdopen(self._pipe, "rb") as pipe:
            self._pipe = None
            received = pipe.read()
        try:
            payload, order, refs = _decoded(received)
        except ValueError:
            status = self._status = self._reap(kill=False)
            if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGBUS:
                # A file shrank under the child's mapped reads: scanning here, without mappings, reports it (or, if
                # it is whole again, measures it) as an in-process scan would.
                self._value = self._scan_here()
                return self._value
            raise RuntimeError(f"the value scan process ended without a result ({_describe(status)})") from None
        if "error" in payload:
            raise _rebuilt(*payload["error"])
        # A child that sent its result is reaped by `close()`: its exit meanwhile overlaps with what follows here.
        table = [TensorStats(*_stats_fields(row)) for row in payload["stats"]]
        names = map(every.__getitem__, order)
        stats = dict(zip(names, map(table.__getitem__, refs), strict=True))
        self._value = ValueStats(MappingProxyType(stats), bytes_read=payload["bytes_read"])
        return self._value

    def _scan_here(self) -> ValueStats:
        source, wanted, progress = self._again
        return _plan_and_scan(source, self._ckpt, wanted, progress=progress)

    def close(self) -> None:
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        self._reap(kill=True)

    def _reap(self, *, kill: bool) -> int:
        if self._pid is None:
            return 0
        pid, self._pid = self._pid, None
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return os.waitpid(pid, 0)[1]


def _child(
    write: int, source: Source, ckpt: Checkpoint, wanted: Callable[[TensorInfo], bool], progress: bool | None
) -> None:
    """The forked child's whole life: it never returns into the parent's code (`os._exit`)."""
    code = 0
    try:
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it kills this process
        faulthandler.disable()  # a SIGBUS here is expected (mapped reads) and handled by the parent: no traceback
        try:
            # Mapped reads: this process may die of SIGBUS (see `value_scan._MappedReader`; the parent then scans).
            message = _encoded(_scan_columns(source, ckpt, wanted, progress=progress, mapped=True))
        except BaseException as exc:  # noqa: BLE001  (sent to the parent, which raises it where it asks for the values)
            message = _framed({"error": [type(exc).__module__, type(exc).__name__, str(exc)]})
        with os.fdopen(write, "wb") as pipe:
            pipe.write(message)
    except BaseException:  # noqa: BLE001  (the parent went away, a broken pipe: it reports the lost result)
        code = 1
    finally:
        os._exit(code)


def _encoded(columns: ScanColumns) -> bytes:
    """The scan's result as one message (`_framed`): every distinct statistics object once, as JSON (its fields in
    order; Python's JSON keeps every float exactly, NaN and the infinities included), then per tensor its position
    among `ckpt.tensors` (the order both processes hold) and its object's, as two arrays of 64-bit integers. Whole-list
    operations: the scan shares one object among equal results, so 93k statistics are a few thousand objects, told
    apart by identity."""
    ids = list(map(id, columns.stats))
    distinct = dict(zip(ids, columns.stats, strict=True))  # first-seen order of each object
    slot = dict(zip(distinct, range(len(distinct)), strict=True))
    table = [[getattr(s, f) for f in _FIELDS] for s in distinct.values()]
    return _framed(
        {"stats": table, "bytes_read": columns.bytes_read}, columns.positions, list(map(slot.__getitem__, ids))
    )


_FRAME = struct.Struct("<QQ")  # JSON bytes, tensors


def _framed(payload: dict[str, Any], order: Sequence[int] = (), refs: Sequence[int] = ()) -> bytes:
    """The frame's length fields, the JSON of `payload`, then `order` and `refs` (one entry per tensor each)."""
    head = json.dumps(payload).encode()  # `json.dump` would encode in Python, chunk by chunk
    return b"".join((_FRAME.pack(len(head), len(order)), head, array("q", order).tobytes(), array("q", refs).tobytes()))


def _decoded(message: bytes) -> tuple[dict[str, Any], array[int], array[int]]:
    """`_framed`'s (payload, order, refs); ValueError if `message` is not a whole frame (the child died first)."""
    if len(message) < _FRAME.size:
        raise ValueError("no frame")
    size, count = _FRAME.unpack_from(message)
    start = _FRAME.size + size
    order, refs = array("q"), array("q")
    if len(message) != start + 2 * count * order.itemsize:
        raise ValueError("a cut frame")
    view = memoryview(message)
    order.frombytes(view[start : start + count * order.itemsize])
    refs.frombytes(view[start + count * order.itemsize :])
    return json.loads(message[_FRAME.size : start]), order, refs


def _stats_fields(row: list[Any]) -> list[Any]:
    """A table row back into `TensorStats` arguments: JSON gave `values` as a list."""
    values = row[_VALUES]
    if values is not None:
        row[_VALUES] = tuple(values)
    return row


def _fields() -> tuple[str, ...]:
    from dataclasses import fields

    from ..model.values import TensorStats

    return tuple(f.name for f in fields(TensorStats))


_FIELDS = _fields()
_VALUES = _FIELDS.index("values")


def _die_with_parent() -> None:
    """Ask Linux to kill this child if the parent dies first (`prctl(PR_SET_PDEATHSIG, SIGKILL)`), so a parent killed
    mid-scan does not leave it reading tens of GB for nobody. Best effort: without it, the child ends at its first
    write into the pipe nobody reads."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent already died before the request took effect
        os._exit(1)


def _rebuilt(module: str, name: str, message: str) -> BaseException:
    """The child's exception, as this process raises it: ckpt's own errors and Python's built-in ones by their type
    (a `TargetError` prints its one line, exit 2), anything else as a RuntimeError naming it."""
    if module == errors.__name__ and isinstance(getattr(errors, name, None), type):
        return getattr(errors, name)(message)
    import builtins

    kind = getattr(builtins, name, None) if module == "builtins" else None
    if isinstance(kind, type) and issubclass(kind, BaseException):
        return kind(message)
    return RuntimeError(f"value scan: {module}.{name}: {message}")


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"
