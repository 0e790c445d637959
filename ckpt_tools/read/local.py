"""Local checkpoints: a folder (single file, sharded with or without an index) or one `.safetensors` file."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from ..errors import TargetError
from ..model.checkpoint import CONFIG_NAMES, INDEX_NAME
from .repair_state import kind_of

CHECKPOINT_JSON = (INDEX_NAME, *CONFIG_NAMES)


def missing_path(target: str) -> str:
    """`no such folder: fixtures/genuin; did you mean fixtures/genuine?`: the closest name beside the deepest part
    of the path that exists (a mistyped last part is the usual mistake)."""
    import difflib

    kind = "file" if target.endswith((".safetensors", ".json")) else "folder"
    text = f"no such {kind}: {target}"
    parent, name = os.path.split(os.path.normpath(os.path.expanduser(target)))
    try:
        siblings = os.listdir(parent or ".")
    except OSError:
        return text
    close = difflib.get_close_matches(name, siblings, n=1, cutoff=0.6)
    if close:
        text += f"; did you mean {os.path.join(os.path.dirname(target.rstrip('/')), close[0])}?"
    return text


def not_a_checkpoint_file(path: Path) -> str:
    """A file other than a `.safetensors` shard (a config.json, a shell glob's MANIFEST.json): name the checkpoint
    folder it belongs to, when it belongs to one, instead of judging its folder silently."""
    folder = path.parent
    try:
        beside = os.listdir(folder)
    except OSError:
        beside = []
    if any(name.endswith(".safetensors") or name == INDEX_NAME for name in beside):
        return f"{path}: not a checkpoint; give its folder {folder} (or one of its .safetensors files)"
    return f"{path}: not a checkpoint; a target is a checkpoint folder or a .safetensors file"


class LocalSource:
    """A checkpoint folder on disk, or a single safetensors file seen as a folder holding just that file."""

    is_remote = False

    def __init__(self, target: str | os.PathLike[str]) -> None:
        path = Path(target)
        self._label = str(target)
        if not path.exists():
            raise TargetError(missing_path(str(target)))
        if path.is_dir():
            self.root = path
            self._only: str | None = None
        elif path.is_file() and not path.name.endswith(".safetensors"):
            raise TargetError(not_a_checkpoint_file(path))
        elif path.is_file():
            self.root = path.parent
            self._only = path.name
        else:
            raise TargetError(f"{target}: not a regular file or directory")
        if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
            raise TargetError(f"{target}: permission denied")

    @property
    def label(self) -> str:
        return self._label

    @property
    def single_file(self) -> str | None:
        """The file name when the target was one file rather than a folder."""
        return self._only

    def path(self, name: str) -> Path:
        return self.root / name

    def list_files(self) -> Sequence[str]:
        if self._only is not None:
            # The configs beside the file describe the model it belongs to; the index and other shards do not count.
            return [self._only, *(n for n in CONFIG_NAMES if n != self._only and (self.root / n).is_file())]
        try:
            entries = list(os.scandir(self.root))
        except OSError as exc:
            raise TargetError(f"{self._label}: cannot list folder ({exc.strerror})") from None
        return sorted(
            entry.name
            for entry in entries
            if _is_file(entry) or _broken_checkpoint_link(entry) or _odd_checkpoint_file(entry)
        )

    def size(self, name: str) -> int:
        path = self.root / name
        try:
            return path.stat().st_size
        except OSError as exc:
            if path.is_symlink():  # say what is wrong with the link, not just ENOENT / ELOOP
                raise OSError(exc.errno, f"broken symbolic link to {os.readlink(path)} ({exc.strerror})") from None
            raise

    def read_range(self, name: str, start: int, length: int) -> bytes:
        fd = open_regular(self.root / name)
        try:
            return os.pread(fd, length, start)
        finally:
            os.close(fd)

    def read_ranges(self, name: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        fd = open_regular(self.root / name)
        try:
            return [os.pread(fd, length, start) for start, length in ranges]
        finally:
            os.close(fd)

    def read_file(self, name: str, limit: int) -> bytes:
        fd = open_regular(self.root / name)
        try:
            size = os.fstat(fd).st_size
            if size > limit:
                raise ValueError(f"{name} is larger than {limit} bytes")
            data = os.pread(fd, size + 1, 0)
            if len(data) > limit:  # grew since fstat
                raise ValueError(f"{name} is larger than {limit} bytes")
            return data
        finally:
            os.close(fd)


def open_regular(path: Path) -> int:
    """A read-only descriptor of a regular file. Links are followed (a Hugging Face cache snapshot's files are links
    into its blobs); anything else (a directory, a FIFO, whose open would wait for a writer forever, a device, a
    socket) raises `OSError` naming what it is, before or instead of being opened."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, f"is {kind_of(st.st_mode)}, not a regular file")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped between the two calls
        os.close(fd)
        raise OSError(errno.EINVAL, f"is {kind_of(st.st_mode)}, not a regular file")
    return fd


def _is_file(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()
    except OSError:  # a symlink loop (ELOOP)
        return False


def _odd_checkpoint_file(entry: os.DirEntry) -> bool:
    """A directory, FIFO, device or socket at the name of a checkpoint file (a shard, the index, a config). It is
    listed so that reading it reports what it is, instead of the file silently counting as absent."""
    name = entry.name
    return (
        not name.startswith(".") and (name.endswith(".safetensors") or name in CHECKPOINT_JSON) and not _is_file(entry)
    )


def _broken_checkpoint_link(entry: os.DirEntry) -> bool:
    """A shard or JSON file that is a dangling or looping symlink (an HF cache snapshot whose blob is gone). It is
    listed so that it is reported as unreadable, not as missing or absent."""
    return entry.is_symlink() and entry.name.endswith((".safetensors", ".json")) and not os.path.exists(entry.path)
