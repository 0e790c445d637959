"""Pre-upload gates: `ckpt doctor --pre-commit` (files -> checkpoint folders, Git LFS awareness) for the hooks in
`.pre-commit-hooks.yaml`. The Python API for scripts is `ckpt_tools.doctor`."""

from .precommit import GateRun, check_files
from .targets import FolderPlan, plan_folders

__all__ = ["FolderPlan", "GateRun", "check_files", "plan_folders"]
