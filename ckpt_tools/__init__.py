"""ckpt-tools: the checkpoint doctor for quantized LLMs.

Python API::

    from ckpt_tools import doctor
    report = doctor("./my-nvfp4-model")
    if report.exit_code("error"):
        raise SystemExit(report.render("text"))
"""

from __future__ import annotations

from importlib import import_module

from ._version import __version__

# Not `from typing import TYPE_CHECKING`: importing typing (and re) here delays the `ckpt` command's Ctrl-C handler
# (cli/main.py), and a Ctrl-C before it would print a Python traceback. Type checkers treat this name as typing's.
TYPE_CHECKING = False

# The API is imported on first use, so that `ckpt --help` and any `ckpt_tools.<module>` import do not pay for the
# whole pipeline (PEP 562 module __getattr__).
_EXPORTS = {
    "Analysis": ".pipeline",
    "analyze": ".pipeline",
    "doctor": ".pipeline",
    "Report": ".report.model",
    "Inspection": ".census",
    "inspect_checkpoint": ".census",
    "inspect": ".census:inspect_checkpoint",  # the name of `ckpt inspect`, kept for existing callers
    "memory_plan": ".memory_plan",
    "CheckServeResult": ".serve",
    "ServePlan": ".serve",
    "check_serve": ".serve",
    "serve_flags": ".serve",
    "CkptError": ".errors",
    "TargetError": ".errors",
    "UsageError": ".errors",
}

if TYPE_CHECKING:  # the same names for type checkers; `X as X` marks each as a re-export (PEP 484)
    from typing import Any

    from .census import Inspection as Inspection
    from .census import inspect_checkpoint as inspect_checkpoint
    from .errors import CkptError as CkptError
    from .errors import TargetError as TargetError
    from .errors import UsageError as UsageError
    from .memory_plan import memory_plan as memory_plan
    from .pipeline import Analysis as Analysis
    from .pipeline import analyze as analyze
    from .pipeline import doctor as doctor
    from .report.model import Report as Report
    from .serve import CheckServeResult as CheckServeResult
    from .serve import ServePlan as ServePlan
    from .serve import check_serve as check_serve
    from .serve import serve_flags as serve_flags

    inspect = inspect_checkpoint


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'ckpt_tools' has no attribute {name!r}")
    module, _, attribute = where.partition(":")
    value = getattr(import_module(module, __name__), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [*_EXPORTS, "__version__"]
