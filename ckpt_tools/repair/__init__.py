"""Repairs that never corrupt a checkpoint: header-only renames, in-place NaN scrubs, orphan-scale drops.

Python API (each returns a `RepairResult`; refusals raise `ckpt_tools.errors.CkptError` with nothing changed)::

    from ckpt_tools.repair import fix_prefix, run
    result = run("./model", fix_prefix.job())                      # the misnested-prefix finding's plan
    result = run("./model", fix_prefix.job([("model.language_model.visual", "model.visual")]), dry_run=True)

Layout: `edits` (what changes, in checkpoint terms), `steps` (the exact bytes, decided from the headers on disk),
`execute` (idempotent, verifying writers), `journal` (the crash-safety protocol and the lock), `guard` (refusals),
`runner` (one job end to end), one module per job (`fix_prefix`, `scrub_nan`, `drop_orphans`, `fix_all`), `render`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .runner import Job, RepairResult, run

__all__ = ["Job", "RepairResult", "run"]


def __getattr__(name: str) -> Any:
    # The runner is imported on first use: every analysis imports `repair.journal` (to finish an interrupted
    # repair first), and that should not cost the whole repair engine.
    if name in __all__:
        from . import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'ckpt_tools.repair' has no attribute {name!r}")
