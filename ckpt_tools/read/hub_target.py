"""Tell a Hub repo id from a local path, without importing huggingface_hub.

Accepted Hub spellings: `org/name`, `org/name@revision`, `hf://org/name`, `hf://org/name@revision`. Every command
classifies its target here, one way: a target is local when it exists on disk, when its first part exists on disk
(`fixtures/genuin` is a mistyped path, since `fixtures/` is here), or when it starts with `.`, `/` or `~`
(`./org/name`). Only `hf://...` or a bare `org/name` with no local `org/` is a Hub repo; `hub_reading` says so in
every Hub error of a bare target. Revisions may contain `/` (`refs/pr/1`), so the revision is everything after the
first `@`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import TargetError, UsageError

HF_SCHEME = "hf://"
# One owner segment and one name segment, as the Hub spells them (validated fully by huggingface_hub later).
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_NON_MODEL_PREFIXES = ("datasets/", "spaces/", "buckets/")


@dataclass(frozen=True)
class HubTarget:
    repo_id: str
    revision: str | None  # as the user asked for it; None means the default branch

    @property
    def label(self) -> str:
        """The target as reports name it: the repo id, with `@revision` when one was asked for."""
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id


def parse_hub_target(target: str, revision: str | None = None) -> HubTarget | None:
    """The Hub repo a target names, or None when it is a local path. Raises on a malformed `hf://` target or a
    revision given twice with different values."""
    explicit = target.startswith(HF_SCHEME)
    if not explicit:
        if target.startswith((".", "/", "~")) or os.path.lexists(target) or os.path.lexists(target.split("/", 1)[0]):
            return None
        body = target
    else:
        body = target[len(HF_SCHEME) :]
        if body.startswith(_NON_MODEL_PREFIXES):
            raise TargetError(f"{target}: only model repos can be inspected (not datasets, spaces or buckets)")
    repo, at, in_target = body.partition("@")
    if not _REPO_ID.fullmatch(repo) or (at and not in_target):
        if explicit:
            raise TargetError(f"{target}: not a Hub model repo; expected hf://org/name or hf://org/name@revision")
        return None
    if in_target and revision and in_target != revision:
        raise UsageError(f"{target}: revision {in_target!r} in the target conflicts with --revision {revision!r}")
    return HubTarget(repo, in_target or revision or None)


def hub_reading(target: str) -> str:
    """How a bare `org/name` target was read, for the Hub's error messages: a user who meant a local folder learns
    why the Hub was asked and how to say `local`."""
    owner = target.split("/", 1)[0]
    repo = target.split("@", 1)[0]
    return f"treated as Hub repo id {repo} (no local folder {owner}/); use ./{repo} for a local path"
