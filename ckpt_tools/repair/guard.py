"""Refusals: every reason a repair must not start, checked before anything is written (exit 2, one line).

Hub targets, read-only files or folders, symlinked files (a Hugging Face cache snapshot links into content-addressed
blobs that other snapshots share), Git LFS pointers, shards whose header the reader rejects, an unreadable index the
plan must update, and one shard of a sharded checkpoint named on its own.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import TargetError
from ..model.checkpoint import INDEX_NAME, Checkpoint
from ..read import open_source
from ..read.hub_target import HF_SCHEME, hub_reading, parse_hub_target
from .edits import Plan
from .fsio import symlink_refusal

_HUB_URL = re.compile(r"^https?://(www\.)?(huggingface\.co|hf\.co)/")


@dataclass(frozen=True)
class LocalTarget:
    root: Path  # the checkpoint folder
    single_file: str | None  # the file name when the target was one .safetensors file


def hub_hint(target: str) -> str:
    repo = _HUB_URL.sub("", target).removeprefix("hf://").removeprefix("models/").split("@", 1)[0].strip("/")
    repo = "/".join(repo.split("/")[:2]) or target
    name = repo.rsplit("/", 1)[-1]
    return (
        f"{target} is on the Hugging Face Hub; repairs change files, so they run on a local copy: "
        f"`hf download {repo} --local-dir ./{name}`, repair `./{name}`, then upload it with "
        f"`hf upload {repo} ./{name} --create-pr`"
        + ("" if target.startswith(HF_SCHEME) or _HUB_URL.match(target) else f"; {hub_reading(target)}")
    )


def resolve_local(target: str) -> LocalTarget:
    """The local folder a repair may write to; refuses Hub targets with the steps to repair a local copy."""
    # The readers' own classification (`read.hub_target`), so a mistyped local path is "no such folder" here too;
    # a Hub page URL is no local path either.
    if _HUB_URL.match(target) or parse_hub_target(target) is not None:
        raise TargetError(hub_hint(target))
    source = open_source(target)
    root = getattr(source, "root", None)
    if source.is_remote or root is None:
        raise TargetError(hub_hint(target))
    return LocalTarget(Path(root), getattr(source, "single_file", None))


def _read_only(path: Path) -> bool:
    # Write bits are checked as well as access(2): root may write anywhere, but a file someone made read-only
    # (chmod a-w) is a request not to change it.
    st = os.stat(path)
    return not (st.st_mode & 0o222) or not os.access(path, os.W_OK)


def check_folder(local: LocalTarget) -> None:
    """The folder must take the lock, the journal and temporary files."""
    if _read_only(local.root):
        raise TargetError(
            f"{local.root}: the folder is read-only; a repair needs to write its journal there "
            f"(copy the checkpoint somewhere writable, or `chmod u+w` it)"
        )


def check_checkpoint(ckpt: Checkpoint) -> None:
    """Refuse checkpoints whose shards cannot all be read: a plan made without some shard's tensors is incomplete."""
    if ckpt.lfs_pointers:
        names = ", ".join(p.name for p in ckpt.lfs_pointers[:3])
        raise TargetError(
            f"{names}: Git LFS pointer(s), not weights; run `git lfs pull` (or `hf download`) first, then repair"
        )
    for problem in ckpt.problems:
        if problem.file in ckpt.shard_files:
            raise TargetError(
                f"{problem.file}: {problem.message}; a repair would rewrite an invalid file, so it "
                f"refuses (re-download or re-export it; `ckpt doctor` explains)"
            )


def check_plan(ckpt: Checkpoint, plan: Plan, local: LocalTarget, *, writable: bool = True) -> None:
    """Raise `TargetError` if any file the plan writes cannot be changed safely. `writable=False` (a dry run, which
    writes nothing) leaves out the symlink and read-only checks: `check_writable` reports them separately."""
    for problem in ckpt.problems:
        if problem.file == INDEX_NAME and plan.touches_index:
            raise TargetError(
                f"{problem.file}: {problem.message}; the repair must update it, so it refuses (fix "
                f"or delete the index first)"
            )
    if local.single_file and (local.root / INDEX_NAME).exists() and plan.touches_index:
        raise TargetError(
            f"{local.single_file} is one shard of the sharded checkpoint in {local.root} (it has "
            f"{INDEX_NAME}); repair the folder so the index is updated too"
        )
    files = sorted(f for f, e in plan.edits.items() if not e.empty)
    if plan.touches_index and ckpt.index is not None:
        files.append(ckpt.index.name)
    for file in files:
        path = local.root / file
        if writable and stat.S_ISLNK(os.lstat(path).st_mode):
            raise symlink_refusal(local.root, file)
        if writable and _read_only(path):
            raise TargetError(f"{file} is read-only; make it writable (`chmod u+w`) to repair it")


def check_writable(ckpt: Checkpoint, plan: Plan, local: LocalTarget) -> None:
    """The folder and every file the plan writes must be writable (`TargetError` otherwise)."""
    check_folder(local)
    check_plan(ckpt, plan, local)
