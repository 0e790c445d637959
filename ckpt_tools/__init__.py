"""ckpt-tools: the checkpoint doctor for quantized LLMs.

Python API::

    from ckpt_tools import doctor
    report = doctor("./my-nvfp4-model")
    if report.exit_code("error"):
        raise SystemExit(report.render("text"))
"""

from __future__ import annotations

__version__ = "0.1.0"

from .pipeline import Analysis, analyze, doctor  # noqa: E402
from .report.model import Report  # noqa: E402
from .serve import CheckServeResult, ServePlan, check_serve, serve_flags  # noqa: E402

__all__ = [
    "Analysis", "CheckServeResult", "Report", "ServePlan", "analyze", "check_serve", "doctor", "serve_flags", "__version__",
]
