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
    rich_markup_mode=None,  # plain help: rich's formatter costs more than the rest of `ckpt --help` together
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
    return (bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ
            and os.environ.get("TERM") != "dumb")


def emit(text: str) -> None:
    """Write the command's output. A reader that went away (`| head -1`) or a closed stdout is not an error of the
    command: the rest is discarded and the command still exits with its verdict (typer would exit 1 on EPIPE)."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
