"""`ckpt repair --resume / --rollback`: act on an interrupted repair, which reading a checkpoint only reports (CK109).

Python API::

    from ckpt_tools.repair.resume import resume
    result = resume("./model")                  # complete it: every file gets the repaired bytes
    result = resume("./model", rollback=True)   # or write the old bytes back, where the journal holds them
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..read.repair_state import JOURNAL_NAME
from . import journal
from .fsio import Writer
from .guard import check_folder, resolve_local
from .journal import Lock, stale_temps


@dataclass(frozen=True)
class ResumeResult:
    target: str
    action: str  # "resume" or "rollback"
    job: str | None  # the interrupted repair acted on; None when there was no journal
    removed: tuple[str, ...]  # temporary files of a killed repair that were removed
    bytes_written: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "action": self.action,
            "job": self.job,
            "removed": list(self.removed),
            "bytes_written": self.bytes_written,
        }

    def render(self) -> str:
        done = "completed" if self.action == "resume" else "rolled back"
        lines = [
            f"{done} the interrupted `{self.job}` repair of {self.target} from its journal"
            if self.job
            else f"no interrupted repair in {self.target}: nothing to {self.action}"
        ]
        if self.removed:
            lines.append(f"removed {len(self.removed)} temporary file(s) of a killed repair: {', '.join(self.removed)}")
        return "\n".join(lines) + "\n"


def resume(target: str, *, rollback: bool = False) -> ResumeResult:
    """Complete (or, with `rollback`, undo) the repair an interrupted process left in `target`'s journal, and remove
    a killed repair's temporary files. Raises `TargetError` (nothing changed) when it must refuse: a Hub target, a
    read-only folder, a repair running, a damaged journal, or a rollback the journal cannot support."""
    local = resolve_local(target)
    root = local.root
    temps = tuple(p.name for p in stale_temps(root))
    if not os.path.lexists(root / JOURNAL_NAME) and not temps:
        return ResumeResult(target, "rollback" if rollback else "resume", None, (), 0)
    check_folder(local)
    writer = Writer()
    with Lock(root):
        job = (journal.rollback if rollback else journal.recover)(root, writer)
    removed = tuple(name for name in temps if not os.path.lexists(root / name))
    return ResumeResult(target, "rollback" if rollback else "resume", job, removed, writer.written)
