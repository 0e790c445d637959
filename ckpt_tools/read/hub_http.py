"""One HTTP GET to a Hub, bounded in time and in bytes, whatever the server does.

The server is not trusted to finish: a reply that stalls after its headers, drips one byte at a time (each byte
resets a read timeout), drips its headers, or redirects in circles must still end. So every request runs on its own
worker thread, and the caller waits for it at most the request's deadline (`CKPT_HUB_REQUEST_TIMEOUT`, default 60 s)
or what is left of the command's (`CKPT_HUB_DEADLINE`, default 900 s), whichever is shorter; at the deadline the
connection is shut down, which ends the worker's read at once, and the caller gets a one-line error. Nor is the
server trusted to stop talking: bodies are read through `Reply.body(limit)`, which refuses more than `limit` bytes,
and an error page is read at most 64 KiB far.

Everything goes through huggingface_hub's shared session (`get_session`, `hf_raise_for_status`), so proxies, the
offline switch and error classification are the ones huggingface_hub applies. Redirects are followed here, one hop at
a time (at most `MAX_REDIRECTS`, http and https only), so that the deadline covers the whole chain; the HTTP client
still builds each hop, dropping the token when the hop leaves the origin.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import TargetError, UsageError

REQUEST_ENV = "CKPT_HUB_REQUEST_TIMEOUT"
COMMAND_ENV = "CKPT_HUB_DEADLINE"
DEFAULT_REQUEST_SECONDS = 60.0
DEFAULT_COMMAND_SECONDS = 900.0
MAX_REDIRECTS = 10
ERROR_BODY_LIMIT = 64 * 1024  # an error page is read this far for its message, never further
_HOP_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})
_GRACE = 1.0  # seconds a worker's socket may outlive its deadline (the caller has already gone)
_BOUNDED_ENCODINGS = frozenset({"", "identity", "gzip", "x-gzip", "deflate"})

T = TypeVar("T")


@dataclass(frozen=True)
class Deadlines:
    """Seconds one request, and all of one command's Hub requests together, may take."""

    request: float = DEFAULT_REQUEST_SECONDS
    command: float = DEFAULT_COMMAND_SECONDS

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Deadlines:
        return cls(
            _seconds(environ, REQUEST_ENV, DEFAULT_REQUEST_SECONDS),
            _seconds(environ, COMMAND_ENV, DEFAULT_COMMAND_SECONDS),
        )


def _seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value > 0:  # also refuses nan
        raise UsageError(f"{name}={raw!r}: expected a number of seconds greater than 0 (for example {default:g})")
    return value


class Budget:
    """The time left for one command's Hub traffic, counted from when the repo was opened. Shared by the threads
    that read shards in parallel; it only reads the clock, so it needs no lock."""

    def __init__(self, deadlines: Deadlines, label: str, endpoint: str) -> None:
        self.deadlines = deadlines
        self.label = label
        self.endpoint = endpoint
        self._end = time.monotonic() + deadlines.command

    def left(self) -> float:
        """Seconds left for the command; a one-line error once there are none."""
        left = self._end - time.monotonic()
        if left <= 0:
            raise self.command_over()
        return left

    def command_over(self) -> TargetError:
        return TargetError(
            f"{self.label}: reading from the Hub at {self.endpoint} took more than {self.deadlines.command:g} s "
            f"in all (the command's deadline, {COMMAND_ENV}); the server is stalling or very slow: try again "
            f"later, or raise {COMMAND_ENV}"
        )

    def request_over(self, what: str) -> TargetError:
        return TargetError(
            f"{self.label}: {what}: no complete answer from {self.endpoint} within "
            f"{self.deadlines.request:g} s (the per-request deadline, {REQUEST_ENV}); the server is stalling or "
            f"very slow: try again later, or raise {REQUEST_ENV}"
        )

    def sleep(self, seconds: float) -> None:
        """Wait before a retry, but never past the command's deadline."""
        time.sleep(min(seconds, self.left()))
        self.left()


class Reply:
    """A response whose headers have arrived; its body is read only through `chunks`, `body` or
    `raise_for_status`, each bounded."""

    def __init__(self, response: Any, cancelled: threading.Event, name: str) -> None:
        self.response = response
        self.name = name  # "repo: what", for messages
        self.status: int = response.status_code
        self.headers: Mapping[str, str] = response.headers
        self._cancelled = cancelled

    @property
    def content_length(self) -> int | None:
        value = self.headers.get("content-length")
        return int(value) if value is not None and value.strip().isdigit() else None

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives (decoded), until it ends or the caller has given up waiting. Only encodings whose
        expansion is bounded are decoded (gzip and deflate: at most about 1,000 times each network read); a brotli
        or zstd body could expand without bound in one step, so it is refused (every request asks for identity)."""
        encoding = self.headers.get("content-encoding", "").strip().lower()
        if encoding not in _BOUNDED_ENCODINGS:
            raise TargetError(
                f"{self.name}: the server sent a {encoding!r}-encoded body, asked for identity; refusing it (its "
                f"size once decoded has no bound)"
            )
        for chunk in self.response.iter_bytes():
            if self._cancelled.is_set():
                return
            yield chunk

    def body(self, limit: int, what: str) -> bytes:
        """The whole body, refused past `limit` bytes: by its Content-Length before any is read, or as it arrives."""
        declared = self.content_length
        if declared is not None and declared > limit:
            raise TooLarge(what, limit, declared)
        parts: list[bytes] = []
        got = 0
        for chunk in self.chunks():
            got += len(chunk)
            if got > limit:
                raise TooLarge(what, limit, None)
            parts.append(chunk)
        return b"".join(parts)

    def raise_for_status(self) -> None:
        """huggingface_hub's error for a 4xx / 5xx (gated, not found, revision, ...), from at most 64 KiB of its
        body: an endless error page cannot fill memory."""
        from huggingface_hub.utils import hf_raise_for_status

        if self.status < 400:
            return
        body = b""
        for chunk in self.chunks():
            body += chunk
            if len(body) >= ERROR_BODY_LIMIT:
                body = body[:ERROR_BODY_LIMIT]
                break
        headers = [(k, v) for k, v in self.response.headers.multi_items() if k.lower() not in _HOP_HEADERS]
        read = type(self.response)(self.status, headers=headers, content=body, request=self.response.request)
        hf_raise_for_status(read)


class TooLarge(Exception):
    """A body longer than its cap; the caller words the message (it knows the repo and the file)."""

    def __init__(self, what: str, limit: int, declared: int | None) -> None:
        sent = f"declared {declared:,} bytes" if declared is not None else "sent more"
        super().__init__(f"{what}: the server {sent}, over the {limit:,}-byte cap; refusing to read it")


def get(url: str, headers: Mapping[str, str], budget: Budget, what: str, consume: Callable[[Reply], T]) -> T:
    """GET `url` (following redirects) and return `consume(reply)`, all within the request's deadline and what is
    left of the command's. `what` names the request in the deadline error ("config.json", "the model info")."""
    command_left = budget.left()
    seconds = min(budget.deadlines.request, command_left)
    exchange = _Exchange(url, dict(headers), time.monotonic() + seconds, f"{budget.label}: {what}")
    future: Future[T] = Future()

    def work() -> None:
        try:
            future.set_result(exchange.run(consume))
        except BaseException as exc:  # noqa: BLE001 - raised again by `result`, in the waiting caller's thread
            future.set_exception(exc)

    threading.Thread(target=work, name="ckpt-hub-request", daemon=True).start()
    try:
        return future.result(timeout=seconds)
    except FutureTimeout:
        exchange.cancel()
        raise (budget.request_over(what) if seconds < command_left else budget.command_over()) from None


class _Exchange:
    """The worker's side of one GET: its hops, its response, and how to stop it from another thread."""

    def __init__(self, url: str, headers: dict[str, str], end: float, name: str) -> None:
        self.url = url
        self.name = name
        self.headers = headers
        self.end = end
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None

    def run(self, consume: Callable[[Reply], T]) -> T:
        from huggingface_hub.utils import get_session

        session = get_session()
        # Byte offsets are into the file, not a compressed stream; and nothing to decompress means nothing to bomb.
        request = session.build_request("GET", self.url, headers={**self.headers, "accept-encoding": "identity"})
        for _hop in range(MAX_REDIRECTS + 1):
            if self.cancelled.is_set():
                raise TargetError("the request was abandoned at its deadline")
            request.extensions = {**request.extensions, "timeout": self._timeouts()}
            response = session.send(request, stream=True, follow_redirects=False)
            try:
                self._watch(response)
                if response.next_request is None:
                    return consume(Reply(response, self.cancelled, self.name))
                request = response.next_request
            finally:
                response.close()
            if request.url.scheme not in ("http", "https"):
                raise TargetError(
                    f"{self.name}: the server redirects to {str(request.url)[:80]!r}, which is not http(s)"
                )
        raise TargetError(f"{self.name}: the server redirects more than {MAX_REDIRECTS} times (a redirect loop?)")

    def _timeouts(self) -> dict[str, float]:
        """Each socket operation's timeout: huggingface_hub's download timeout, but not much past the deadline (a
        grace second, so that at the deadline the caller reports the deadline, not a read timeout racing it)."""
        from huggingface_hub import constants

        left = self.end - time.monotonic() + _GRACE
        seconds = max(0.001, min(float(constants.HF_HUB_DOWNLOAD_TIMEOUT), left))
        return {"connect": seconds, "read": seconds, "write": seconds, "pool": seconds}

    def _watch(self, response: Any) -> None:
        """Remember the response's socket, so that `cancel` can end a read blocked on it."""
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        with self._lock:
            self._socket = sock if isinstance(sock, socket.socket) else None
            if self.cancelled.is_set():
                self._shutdown()

    def cancel(self) -> None:
        """Stop the worker: its next chunk ends the body, and a read blocked on the socket returns now."""
        with self._lock:
            self.cancelled.set()
            self._shutdown()

    def _shutdown(self) -> None:
        if self._socket is not None:
            # The base class's shutdown: on a TLS socket it closes the TCP stream under the TLS layer without
            # touching the TLS object another thread is reading through.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(self._socket, socket.SHUT_RDWR)
