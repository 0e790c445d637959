"""What a published serve recipe names the model by: the Hub repo id (given, or inferred from where the checkpoint
lives), else the documented `/model` mount filled from `$MODEL_DIR`. Never the publisher's own local path."""

from __future__ import annotations

import re
from pathlib import Path

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
CACHE_DIR = re.compile(r"(?:^|/)models--([^/]+?)--([^/]+)/snapshots/[^/]+/?$")
GIT_REMOTE = re.compile(
    r"url\s*=\s*(?:https?://(?:[^@/]+@)?(?:huggingface\.co|hf\.co)/|git@hf\.co:)"
    r"(?:models/)?([\w.-]+/[\w.-]+?)(?:\.git)?/?\s*$",
    re.M,
)
MODEL_DIR_VAR = "MODEL_DIR"
DRAFTER_DIR_VAR = "DRAFTER_DIR"


def infer_repo_id(target: str) -> str | None:
    """The Hub repo a checkpoint belongs to: the target itself when it is a repo id (`org/name`, `hf://org/name`,
    `org/name@rev`), a Hugging Face cache snapshot folder (`models--org--name/snapshots/<sha>`), or a local clone whose
    git remote is on the Hub. None when nothing says so."""
    from ..read.hub_target import parse_hub_target

    hub = parse_hub_target(target)
    if hub is not None:
        return hub.repo_id
    path = Path(target).resolve()
    folder = path if path.is_dir() else path.parent
    m = CACHE_DIR.search(str(folder))
    if m:
        return f"{m.group(1)}/{m.group(2)}"
    config = folder / ".git" / "config"
    if config.is_file():
        m = GIT_REMOTE.search(config.read_text(encoding="utf-8", errors="replace"))
        if m:
            return m.group(1)
    return None


def served_name(target: str, repo_id: str | None) -> str:
    """The name clients request (`--served-model-name`): the repo id, else the checkpoint folder's name."""
    if repo_id:
        return repo_id
    path = Path(target)
    return (path.parent.name if path.suffix == ".safetensors" else path.name) or "model"


def host_mount(var: str, what: str) -> str:
    """A bind-mount source a shell (and docker compose) fills from an environment variable, failing with a message
    when it is unset: the recipe never carries the publisher's path."""
    return f"${{{var}:?set {var} to the {what} folder}}"
