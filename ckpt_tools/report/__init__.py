"""The report object (ckpt report contract, schema_version 1) and its views, one module per format."""

from .model import SCHEMA_VERSION, Report

__all__ = ["SCHEMA_VERSION", "Report"]
