"""A computation on a thread of its own, its result (or exception) collected later."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class InThread(Generic[T]):
    """`fn()` started now on a daemon thread; `result()` waits for it and returns its value or raises its exception.

    For work that releases the interpreter lock (hashing large buffers: `hashlib` does above a few kilobytes), which
    then runs on another core while the caller goes on; the answer is the same as calling `fn()` in place."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ckpt-repair", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # noqa: BLE001 - raised again by `result`, in the caller's thread
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set by `_run` when no error was raised
