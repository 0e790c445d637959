"""Map the files a pre-commit hook receives to the checkpoint folders that hold them, each folder once."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import TargetError
from ..model.checkpoint import INDEX_NAME
from ..read.loader import SHARD_SUFFIX


@dataclass(frozen=True)
class FolderPlan:
    folders: tuple[str, ...]  # checkpoint folders to check, as paths relative to where the files were named
    ignored: tuple[str, ...]  # files whose folder holds no checkpoint (a stray config.json), left alone


def is_checkpoint_folder(folder: str) -> bool:
    """A folder is a checkpoint when it holds a `.safetensors` file or the index (whose shards may be missing)."""
    try:
        with os.scandir(folder) as entries:
            return any(e.name.endswith(SHARD_SUFFIX) or e.name == INDEX_NAME for e in entries if e.is_file())
    except OSError as exc:
        raise TargetError(f"{folder}: cannot list folder ({exc.strerror or exc})") from None


def plan_folders(paths: Iterable[str]) -> FolderPlan:
    """Folders to check for `paths` (files, or folders given directly), sorted, each once however it was spelled.

    pre-commit passes every staged file that matches the hook's `files` pattern, so a commit of a 4-shard checkpoint
    arrives as 6+ paths in one folder: the folder is what gets judged, because shards, index and configs are only
    meaningful together.
    """
    folders: dict[str, str] = {}  # real path -> label
    ignored: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            folder = os.path.normpath(path)
        else:
            folder = os.path.dirname(os.path.normpath(path)) or "."
            if not os.path.isdir(folder):
                raise TargetError(f"{path}: no such file or directory")
        if not is_checkpoint_folder(folder):
            ignored.append(path)
            continue
        folders.setdefault(os.path.realpath(folder), folder)
    return FolderPlan(tuple(sorted(folders.values())), tuple(ignored))
