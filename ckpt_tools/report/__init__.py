"""The report object (ckpt report contract, schema_version 1) and its views, one module per format
(renderers.py lists them).

`Report` and `SCHEMA_VERSION` are imported on first use, so that the CLI can read the list of output formats at
start-up without importing the rules (PEP 562 module __getattr__)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import SCHEMA_VERSION as SCHEMA_VERSION
    from .model import Report as Report

__all__ = ["SCHEMA_VERSION", "Report"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'ckpt_tools.report' has no attribute {name!r}")
