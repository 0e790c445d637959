"""ckpt-tools: the checkpoint doctor for quantized LLMs.

Python API::

    from ckpt_tools import doctor
    report = doctor("./my-nvfp4-model")
    if report.exit_code("error"):
        raise SystemExit(report.render("text"))
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING, Any

# The API is imported on first use (PEP 562), so `ckpt --help` and the CLI's start-up do not pay for the whole
# pipeline, and Ctrl-C during start-up meets the CLI's handler rather than an import in progress.
_EXPORTS = {
    "Analysis": "pipeline", "analyze": "pipeline", "doctor": "pipeline",
    "Report": "report.model",
    "CheckServeResult": "serve", "ServePlan": "serve", "check_serve": "serve", "serve_flags": "serve",
    "CkptError": "errors", "TargetError": "errors", "UsageError": "errors",
}

__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from .errors import CkptError, TargetError, UsageError
    from .pipeline import Analysis, analyze, doctor
    from .report.model import Report
    from .serve import CheckServeResult, ServePlan, check_serve, serve_flags


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ckpt_tools' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
