"""ckpt-tools: the checkpoint doctor for quantized LLMs.

Python API::

    from ckpt_tools import doctor
    report = doctor("./my-nvfp4-model")
    if report.exit_code("error"):
        raise SystemExit(report.render("text"))
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The API is imported on first use, so that `ckpt --help` and any `ckpt_tools.<module>` import do not pay for the
# whole pipeline (PEP 562 module __getattr__).
_EXPORTS = {
    "Analysis": ".pipeline",
    "analyze": ".pipeline",
    "doctor": ".pipeline",
    "Report": ".report.model",
    "Inspection": ".census",
    "inspect": ".census",
    "CheckServeResult": ".serve",
    "ServePlan": ".serve",
    "check_serve": ".serve",
    "serve_flags": ".serve",
    "CkptError": ".errors",
    "TargetError": ".errors",
    "UsageError": ".errors",
}

if TYPE_CHECKING:
    from .errors import CkptError, TargetError, UsageError
    from .pipeline import Analysis, analyze, doctor
    from .census import Inspection, inspect
    from .report.model import Report
    from .serve import CheckServeResult, ServePlan, check_serve, serve_flags


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ckpt_tools' has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [*_EXPORTS, "__version__"]
