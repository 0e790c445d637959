"""What Git says about a checkpoint folder: which files Git LFS tracks, and which Hub repo the clone came from.

Read-only `git` queries; when git is missing or the folder is not in a work tree, the answers are "unknown".
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

GIT_TIMEOUT = 30.0
# https://huggingface.co/org/name(.git), https://user:token@hf.co/org/name, git@hf.co:org/name.git,
# ssh://git@hf.co/org/name: only the org/name part is ever kept (a remote URL may carry a token).
_HUB_REMOTE = re.compile(
    r"^(?:[a-z+]+://)?(?:[^@/\s]+@)?(?:huggingface\.co|hf\.co)[:/]"
    r"(?!datasets/|spaces/)([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*?)(?:\.git)?/?$"
)


def _git(folder: str, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", folder, *args], capture_output=True, text=True, timeout=GIT_TIMEOUT, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def lfs_tracked(folder: str, names: Sequence[str]) -> dict[str, bool | None]:
    """File name -> whether `.gitattributes` routes it through Git LFS (`filter=lfs`); None when Git cannot tell."""
    if not names:
        return {}
    out = _git(folder, "check-attr", "-z", "filter", "--", *names)
    if out is None:
        return dict.fromkeys(names)
    fields = out.split("\0")
    values = {fields[i]: fields[i + 2] for i in range(0, len(fields) - 2, 3)}
    return {n: values.get(n) == "lfs" for n in names}


def hub_repo_of(folder: str) -> str | None:
    """`org/name` when the clone's `origin` (or its only remote) is a Hugging Face model repo."""
    remotes = (_git(folder, "remote") or "").split()
    if not remotes:
        return None
    remote = "origin" if "origin" in remotes else remotes[0]
    url = (_git(folder, "remote", "get-url", remote) or "").strip()
    match = _HUB_REMOTE.match(url)
    return match.group(1) if match else None
