"""The typer application every command module registers on, and the shared option types."""

from __future__ import annotations

import os
import sys
from enum import Enum

import typer

app = typer.Typer(
    name="ckpt",
    help="The checkpoint doctor for quantized LLMs: inspect, judge, repair and serve safetensors checkpoints.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    sarif = "sarif"


class TextOrJson(str, Enum):
    """Commands whose output is a plan or a census, not a report: no markdown or SARIF rendering."""

    text = "text"
    json = "json"


class FailOn(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"
    none = "none"


def use_color(stream=None) -> bool:  # noqa: ANN001
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ


def emit(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
