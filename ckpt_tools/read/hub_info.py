"""What a Hub's model-info answer must look like before anything uses it: the commit sha and the file list.

The answer comes from whatever HF_ENDPOINT points at, so each value is checked for its type and form here, once,
and the rest of the reader sees only a `RepoListing`. The commit sha names the range cache's file and pins every
later URL, so it must be a git commit id (40 lowercase hex digits). A file name must be a path a git tree can hold
(no `..`, no absolute path, no empty segment, no backslash or control character), even though a Hub file name never
becomes a local path: one that could is a lie about the repo, refused with the rest of the answer. Sizes are
non-negative integers (not strings, floats or booleans). Any other answer is a one-line refusal (exit 2).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..errors import TargetError

_COMMIT_SHA = re.compile(r"[0-9a-f]{40}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_SIZE = 2**63 - 1  # what a safetensors offset can address
MAX_NAME = 1024


@dataclass(frozen=True)
class RepoListing:
    sha: str
    sizes: MappingProxyType[str, int]  # file in the repo root -> bytes (files in subfolders are not the checkpoint)


def parse_model_info(raw: bytes, repo_id: str, label: str, revision: str | None, endpoint: str) -> RepoListing:
    """The commit and root files of a model-info body (`/api/models/{repo}[/revision/{rev}]?blobs=true`)."""
    try:
        info = json.loads(raw)
    except (ValueError, RecursionError):
        info = None
    if not isinstance(info, dict):
        raise TargetError(
            f"{repo_id}: {endpoint} did not answer like a Hugging Face Hub (not a JSON object); check HF_ENDPOINT"
        )
    if not info.get("sha"):
        raise TargetError(f"{label}: the Hub did not say which commit {revision or 'main'} is")
    sha = checked_commit(info["sha"], label, endpoint)
    siblings = info.get("siblings")
    if siblings is None:
        siblings = []
    if not isinstance(siblings, list):
        raise _lie(label, endpoint, f"a file list (`siblings`) that is {_kind(siblings)}")
    sizes: dict[str, int] = {}
    for sibling in siblings:
        name, size = _sibling(sibling, label, endpoint)
        if "/" in name:
            continue
        if name in sizes:
            raise _lie(label, endpoint, f"{_shown(name)} twice in the file list")
        if size is None:
            raise TargetError(f"{label}: the Hub did not report the size of {name}")
        sizes[name] = size
    return RepoListing(sha, MappingProxyType(sizes))


def checked_commit(sha: object, label: str, endpoint: str) -> str:
    """The commit sha a server answered, if it is one (40 lowercase hex digits, as git and the Hub write it). It
    names the cache file and pins every later URL, so anything else (a path, `..`, a URL) is refused."""
    if isinstance(sha, str) and _COMMIT_SHA.fullmatch(sha):
        return sha
    raise TargetError(
        f"{label}: {endpoint} answered {_shown(sha)} as the commit sha, which is not 40 hex digits; refusing to use "
        f"it (check HF_ENDPOINT: a server that lies about commits is not a Hugging Face Hub)"
    )


def _sibling(sibling: object, label: str, endpoint: str) -> tuple[str, int | None]:
    """(file name, size or None) of one `siblings` entry; the LFS size wins, as it is the file's real size."""
    if not isinstance(sibling, dict):
        raise _lie(label, endpoint, f"a file list entry that is {_kind(sibling)}")
    name = sibling.get("rfilename")
    problem = name_problem(name)
    if problem:
        raise _lie(label, endpoint, f"a file named {_shown(name)} ({problem})")
    assert isinstance(name, str)
    size = _size(sibling.get("size"), name, label, endpoint)
    lfs = sibling.get("lfs")
    if lfs is None:
        return name, size
    if not isinstance(lfs, dict) or lfs.get("size") is None:
        raise _lie(label, endpoint, f"LFS details of {_shown(name)} without a size ({_kind(lfs)})")
    return name, _size(lfs["size"], name, label, endpoint)


def name_problem(name: object) -> str | None:
    """Why `name` cannot be a file of a git tree, or None if it can."""
    if not isinstance(name, str):
        return f"not a string but {_kind(name)}"
    if not name or len(name) > MAX_NAME:
        return "empty" if not name else f"longer than {MAX_NAME} characters"
    if _CONTROL.search(name) or "\\" in name:
        return "a control character or backslash"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid Unicode"
    if name.startswith("/"):
        return "an absolute path"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "an empty, `.` or `..` path segment"
    return None


def _size(value: object, name: str, label: str, endpoint: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_SIZE:
        raise _lie(label, endpoint, f"{_shown(value)} as the size of {_shown(name)} (not a byte count)")
    return value


def _lie(label: str, endpoint: str, what: str) -> TargetError:
    return TargetError(
        f"{label}: {endpoint} answered {what}; refusing its answer (a Hugging Face Hub never sends this: check "
        f"HF_ENDPOINT)"
    )


def _kind(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
