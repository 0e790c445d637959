"""Free space: what a repair needs on the folder's filesystem before it writes anything, and the errors that mean
the disk (or a quota) is full."""

from __future__ import annotations

import os

from ..errors import TargetError
from .fsio import Folder
from .steps import IndexStep, RewriteStep, Step

SLACK = 1024 * 1024  # directory entries, indirect blocks, the filesystem's own rounding


def space_needed(
    folder: Folder, steps: tuple[Step, ...], journal_bytes: int, *, together: bool = False
) -> tuple[int, str]:
    """Bytes the repair occupies at its peak, beyond what the checkpoint already takes, and what they are for.

    The journal stays until the end. A rebuilt shard's copy exists beside the original until the rename frees the
    original's blocks (unless the original is hard-linked: the other link keeps them). Built one at a time, copies
    need the largest of them; built `together` before the first rename (the short-window order, `execute`), they
    need all of them. The new index is written after the last rename. In-place writes (headers, NaN bytes) need no
    new blocks."""
    block = max(os.statvfs(folder.fd).f_frsize, 1)

    def blocks(n: int) -> int:
        return -(-n // block) * block

    rewrites = [s for s in steps if isinstance(s, RewriteStep)]
    linked = [s for s in rewrites if (st := folder.lstat(s.file)) is not None and st.st_nlink > 1]
    single = [s for s in rewrites if s not in linked]
    index = sum(blocks(len(s.new)) for s in steps if isinstance(s, IndexStep))
    if together:
        copies = sum(blocks(s.new_size) for s in rewrites) + index
        what = [f"rebuilt copies of {len(rewrites)} shard(s) at once"] if rewrites else []
    else:
        biggest = max(single, key=lambda s: s.new_size, default=None)
        copies = sum(blocks(s.new_size) for s in linked) + max(blocks(biggest.new_size) if biggest else 0, index)
        what = [f"a rebuilt copy of {biggest.file}"] if biggest is not None else []
        what += [f"{len(linked)} rebuilt hard-linked shard(s)"] if linked else []
    what = ["the journal", *what, *(["the new index"] if index else [])]
    return blocks(journal_bytes) + copies + SLACK, ", ".join(what)


def check_free_space(folder: Folder, steps: tuple[Step, ...], journal_bytes: int) -> bool:
    """Refuse, before anything is written, a repair the filesystem has no room for. Returns whether it has room to
    build every rebuilt shard before the first rename (else they are built and renamed one at a time)."""
    st = os.statvfs(folder.fd)
    available = st.f_bavail * st.f_frsize
    needed, what = space_needed(folder, steps, journal_bytes)
    if needed > available:
        raise TargetError(
            f"{folder.path}: not enough free space for the repair: it needs {needed:,} B ({what}) and "
            f"the filesystem has {available:,} B available; free some space, or repair a copy on a "
            f"larger disk (nothing was changed)"
        )
    return space_needed(folder, steps, journal_bytes, together=True)[0] <= available
