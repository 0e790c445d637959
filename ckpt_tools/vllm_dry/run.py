"""`ckpt doctor --vllm`, the parent's side: stage the checkpoint's headers and configs, run meta_load.py in the
interpreter that has vLLM (a subprocess with a timeout), and read back its `LoadAccounting`. This process imports
neither torch nor vLLM.

Which interpreter: `--vllm-python`, else `CKPT_VLLM_PYTHON`, else the one running ckpt (vLLM installed beside
ckpt-tools, `pip install "ckpt-tools[vllm]"`). Every failure is one line (`VllmDryRunError`, exit 2): vLLM not
importable (with the install hint), the timeout, or the child's crash with the last line of its stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CkptError
from ..load.accounting import LoadAccounting
from ..model.checkpoint import Checkpoint
from ..read.source import Source

META_LOAD = Path(__file__).with_name("meta_load.py")
ENV_PYTHON = "CKPT_VLLM_PYTHON"
ENV_TIMEOUT = "CKPT_VLLM_TIMEOUT"
DEFAULT_TIMEOUT = 300.0
NO_VLLM_EXIT = 3  # meta_load.NO_VLLM_EXIT (that file is not imported here: it is the child's)
INSTALL_HINT = (
    'install it beside ckpt-tools (pip install "ckpt-tools[vllm]", or the vLLM of the serving machine), or point '
    f"--vllm-python / {ENV_PYTHON} at an interpreter that has it"
)
_CONFIG_LIMIT = 64 * 1024 * 1024  # a config or index file larger than this is not staged


class VllmDryRunError(CkptError):
    """The dry run could not give vLLM's verdict: one line saying why."""


@dataclass(frozen=True)
class DryRunOptions:
    """How to run vLLM: the interpreter (None: CKPT_VLLM_PYTHON, else this one) and the timeout in seconds (None:
    CKPT_VLLM_TIMEOUT, else 300)."""

    python: str | None = None
    timeout: float | None = None

    def interpreter(self) -> str:
        return self.python or os.environ.get(ENV_PYTHON) or sys.executable

    def seconds(self) -> float:
        if self.timeout is not None:
            return self.timeout
        raw = os.environ.get(ENV_TIMEOUT)
        if raw:
            try:
                value = float(raw)
            except ValueError:
                raise VllmDryRunError(f"{ENV_TIMEOUT}={raw!r} is not a number of seconds") from None
            if value > 0:
                return value
            raise VllmDryRunError(f"{ENV_TIMEOUT}={raw!r} must be more than 0 seconds")
        return DEFAULT_TIMEOUT


@dataclass(frozen=True)
class DryRun:
    """vLLM's verdict: its accounting, the platform it built the model on, where the time went."""

    accounting: LoadAccounting
    platform: str
    seconds: Mapping[str, float] = field(default_factory=dict)
    unreadable_files: tuple[str, ...] = ()


def stage(source: Source, ckpt: Checkpoint, into: Path) -> Path:
    """`into` filled with what the child reads of a checkpoint that is not a local folder (a Hub repo, one file of a
    folder): the root's JSON files (config, quantization config, index) and every shard as its header alone (the
    8-byte length and the JSON header, no tensor data)."""
    for name in source.list_files():
        if "/" in name or not name.endswith(".json"):
            continue
        try:
            (into / name).write_bytes(source.read_file(name, _CONFIG_LIMIT))
        except ValueError:
            continue
    for shard in ckpt.shards:
        if shard.valid:
            (into / shard.name).write_bytes(source.read_range(shard.name, 0, shard.data_start))
    return into


class Pending:
    """A dry run under way: started by `start_dry_run`, answered once by `result()` (which waits for it)."""

    def __init__(self, folder: Path, options: DryRunOptions, scratch: Path | None) -> None:
        self._options, self._scratch = options, scratch
        self._timeout = options.seconds()
        self._python = options.interpreter()
        self._lock = threading.Lock()
        self._answer: DryRun | VllmDryRunError | None = None
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [self._python, str(META_LOAD), str(folder)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # the child and whatever it spawns can be stopped as one group
            )
        except OSError as exc:
            self._proc = None
            self._answer = VllmDryRunError(f"--vllm: cannot run {self._python}: {exc.strerror or exc}")
            self._cleanup()

    def result(self) -> DryRun:
        with self._lock:
            if self._answer is None:
                try:
                    self._answer = self._wait()
                except VllmDryRunError as exc:
                    self._answer = exc
                finally:
                    self._cleanup()
        if isinstance(self._answer, VllmDryRunError):
            raise self._answer
        return self._answer

    def close(self) -> None:
        """Stop the child if nobody waited for it (the command ended early)."""
        if self._proc is not None and self._proc.poll() is None:
            self._kill()
        self._cleanup()

    def _wait(self) -> DryRun:
        proc = self._proc
        assert proc is not None
        try:
            out, err = proc.communicate(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            raise VllmDryRunError(
                f"--vllm: vLLM's dry run did not finish within {self._timeout:g} s "
                f"(--vllm-timeout / {ENV_TIMEOUT} sets the limit)"
            ) from None
        last = _last_line(err)
        if proc.returncode == NO_VLLM_EXIT:
            raise VllmDryRunError(f"--vllm: vLLM is not importable by {self._python} ({last}); {INSTALL_HINT}")
        if proc.returncode != 0:
            why = f"exit code {proc.returncode}" if proc.returncode > 0 else f"signal {-proc.returncode}"
            raise VllmDryRunError(f"--vllm: vLLM's dry run crashed ({why}): {last or 'no message on stderr'}")
        return parse(out)

    def _kill(self) -> None:
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()

    def _cleanup(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def start_dry_run(source: Source, ckpt: Checkpoint, options: DryRunOptions) -> Pending:
    """Start vLLM's dry run of the checkpoint now; `result()` waits for its verdict."""
    root = getattr(source, "root", None)
    if not source.is_remote and root is not None and getattr(source, "single_file", None) is None:
        return Pending(Path(root), options, None)  # a local folder: the child reads its headers in place
    scratch = Path(tempfile.mkdtemp(prefix="ckpt-vllm-"))
    try:
        folder = stage(source, ckpt, scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return Pending(folder, options, scratch)


def parse(out: bytes) -> DryRun:
    """The child's stdout as a DryRun; anything else is a one-line error."""
    text = out.decode("utf-8", "replace").strip()
    try:
        data: Any = json.loads(text)
        if not isinstance(data, dict) or data.get("judge") != "vllm":
            raise ValueError("not an accounting")
        acc = LoadAccounting.from_dict(data)
    except (ValueError, TypeError, KeyError):
        shown = text[:80] + ("..." if len(text) > 80 else "")
        raise VllmDryRunError(f"--vllm: vLLM's dry run printed no accounting: {shown!r}") from None
    seconds = data.get("seconds")
    return DryRun(
        acc,
        str(data.get("platform") or "unknown"),
        {str(k): float(v) for k, v in seconds.items()} if isinstance(seconds, dict) else {},
        tuple(str(f) for f in data.get("unreadable_files") or ()),
    )


def _last_line(err: bytes) -> str:
    lines = [ln.strip() for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1] if lines else ""
