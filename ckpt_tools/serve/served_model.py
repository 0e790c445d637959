"""Which checkpoint a serve command loads, compared with the one `ckpt check-serve` judged: the filesystem look-ups
(real paths, mounts, a folder's Hub repo) that the pure check CS107 must not do itself."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..read.hub_target import parse_hub_target
from .parser import ParsedCommand
from .publish import infer_repo_id


@dataclass(frozen=True)
class ServedModel:
    served: str  # the model as the command spells it
    checkable: str  # what `ckpt check-serve` would take for it: the host folder, or the Hub repo id
    note: str | None = None  # how it was resolved, when the spelling does not say (a mount)


def _folder(path: str) -> str:
    path = os.path.realpath(os.path.expanduser(path))
    return os.path.dirname(path) if path.endswith(".safetensors") else path


def _host_path(cmd: ParsedCommand, model: str) -> str | None:
    """A container path of `docker run`, mapped back through its `-v HOST:CONTAINER` mounts (None: not mounted, or
    a host side left to a variable such as `${MODEL_DIR}`)."""
    for host, container in cmd.mounts:
        container = container.rstrip("/")
        if model == container or model.startswith(container + "/"):
            return None if "$" in host else host + model[len(container) :]
    return None


def different_model(target: str, cmd: ParsedCommand) -> ServedModel | None:
    """The model the command serves when it is certainly not the target: another folder on this machine, or another
    Hub repo. None when they are the same, or when nothing here can tell: a path that does not exist here (the
    command may run on another machine), a bare word, an unmounted container path, a local target whose Hub repo is
    unknown."""
    model = cmd.model
    if not model:
        return None
    if cmd.kind == "docker" and model.startswith("/") and not os.path.exists(model):
        model = _host_path(cmd, model) or ""
        if not model:
            return None
    try:
        served_hub, target_hub = parse_hub_target(model), parse_hub_target(target)
    except Exception:  # noqa: BLE001 - a malformed hf:// spelling is another check's business
        return None
    if served_hub is not None:
        repo = target_hub.repo_id if target_hub else infer_repo_id(target)
        if repo is None or repo == served_hub.repo_id:
            return None
        return ServedModel(cmd.model or model, served_hub.repo_id, None if cmd.model == model else "Hub repo")
    if target_hub is not None or not os.path.exists(model):
        return None  # a local path served for a Hub target could be its download
    if _folder(model) == _folder(target):
        return None
    return ServedModel(cmd.model or model, model, None if cmd.model == model else f"mounted from {model}")
