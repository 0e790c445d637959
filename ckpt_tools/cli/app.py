"""The typer application every command module registers on, and the shared option types."""

from __future__ import annotations

import errno
import os
import shlex
import sys
import types
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

import typer
import typer.core

from ..errors import UsageError
from ..report.renderers import OUTPUT_FORMATS

app = typer.Typer(
    name="ckpt",
    help="The checkpoint doctor for quantized LLMs: inspect, judge, repair and serve safetensors checkpoints.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich's formatter costs more than the rest of `ckpt --help` together
    context_settings={"help_option_names": ["-h", "--help"]},
)

GLOBAL_FLAGS = ("--no-progress", "-q", "--quiet")  # accepted before or after the command name (main() hoists them)


class State:
    """Process-wide output settings from the global options."""

    quiet = False
    argv: list[str] | None = None  # the command line main() ran (None when the app is invoked another way)
    own_process = False  # set by `console()`: the process ends with this command (see `keep_until_exit`)
    kept: ClassVar[list[object]] = []
    interrupted = False  # a Ctrl-C arrived while the command ran (main._interrupt)
    settling = False  # the command returned: a Ctrl-C is remembered, no longer raised
    interrupt_hints: ClassVar[list[str]] = []  # lines `ckpt: interrupted` adds (how to finish an interrupted repair)


def keep_until_exit(result: object) -> None:
    """Leave what a command built (an analysis: a few objects per tensor) for process exit to reclaim, instead of
    freeing it object by object when the command returns (docs/performance.md). Only when the
    process is the `ckpt` console command (`main.console`); an in-process caller of `main()` frees it as usual."""
    if State.own_process:
        State.kept.append(result)


def _type_label(self, ctx) -> str | None:
    """The help's type column: the choices of an enum option, nothing for a switch, the value's name otherwise (no
    `<bool>` / `<str>` labels)."""
    desc = self.type_descriptor
    if desc.is_choice:
        return "[" + "|".join(str(getattr(c, "value", c)) for c in desc.choices or ()) + "]"
    if isinstance(self, typer.core.TyperOption) and (self.is_flag or self.is_bool_flag):
        return None
    if isinstance(self, typer.core.TyperArgument):
        return None
    if self.metavar and self.metavar.startswith("["):  # choices spelled out by the option itself (--fail-on)
        return self.metavar
    return (self.metavar or self.name or "value").upper()  # a repeatable option still takes one value per use


def _usage_name(self) -> str:
    """Conventional usage pieces: `TARGET`, `TARGET...`, `[COMMAND]...` (typer prints `{TARGET}...`)."""
    name = (self.metavar or self.name or "ARG").upper()
    name = name if self.required else f"[{name}]"
    return name + ("..." if self.nargs != 1 else "")


# typer offers no hook for the help's type column or the usage names, so its two methods are replaced; mypy rightly
# flags assigning to a method, which is the point here.
typer.core.TyperOption.display_type_rich = _type_label  # type: ignore[method-assign]


def runtime_help(text: str) -> str:
    """An option's help with `{default_runtime}` / `{other_runtimes}` filled from rules/runtimes (the profile marked
    `default = true`, and the other profile ids) and `{hardware_ids}` from rules/hardware.toml. Filled when the help
    is printed, so that `ckpt --help`, which prints no option help, reads no knowledge file."""
    if "{hardware_ids}" in text:
        from ..knowledge.hardware import profiles

        text = text.replace("{hardware_ids}", ", ".join(p.id for p in profiles()))
    if "{default_runtime}" not in text and "{other_runtimes}" not in text:
        return text
    from ..knowledge.runtimes import default_runtime_id, runtime_ids

    default = default_runtime_id()
    others = ", ".join(rid for rid in runtime_ids() if rid != default)
    return text.replace("{default_runtime}", default).replace("{other_runtimes}", others)


_option_help_record = typer.core.TyperOption.get_help_record


def _help_record(self, ctx):
    record = _option_help_record(self, ctx)
    return None if record is None else (record[0], runtime_help(record[1]))


typer.core.TyperOption.get_help_record = _help_record  # type: ignore[method-assign]
typer.core.TyperArgument.display_type_rich = _type_label  # type: ignore[method-assign]
typer.core.TyperArgument._usage_display_name = _usage_name  # type: ignore[method-assign]


# ---- option values without pydantic ---------------------------------------------------------------------------------
# typer (0.2x) coerces every option value through a pydantic TypeAdapter: importing pydantic and building one adapter
# per option delays every command's start (docs/performance.md). Our options are plain strings, flags, small integers, string
# lists and str enums; a value that is already what the adapter would return is passed as the adapter would pass it,
# and anything else (a bad value, an annotation not listed here) goes to typer's own coercion, so its errors and
# messages are unchanged. Older typer versions have no such layer and are left alone.
_MISS = object()


def _never(value: object) -> object:
    return _MISS


def _as_bool(value: object) -> object:
    return value if type(value) is bool else _MISS


def _as_str(value: object) -> object:
    return value if type(value) is str else _MISS


def _as_int(value: object) -> object:
    if type(value) is int:
        return value
    return int(value) if type(value) is str and value.isascii() and value.isdigit() else _MISS


def _as_str_list(value: object) -> object:
    if type(value) in (tuple, list) and all(type(v) is str for v in value):  # type: ignore[attr-defined]
        return list(value)  # type: ignore[call-overload]
    return _MISS


def _as_member(enum: type[Enum]):
    members = {m.value: m for m in enum}

    def member(value: object) -> object:
        if type(value) is enum:  # a default: typer passes the member itself
            return value
        return members.get(value, _MISS) if type(value) is str else _MISS

    return member


def _plain_coercion(annotation: object):
    """The fast coercion of an annotation, or None for typer's own. `X | None` is X's: typer returns None itself."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (types.UnionType, typing.Union) and len(args) == 2 and type(None) in args:
        annotation = args[0] if args[1] is type(None) else args[1]
    if annotation is str:
        return _as_str
    if annotation is bool:
        return _as_bool
    if annotation is int:
        return _as_int
    if annotation == list[str]:
        return _as_str_list
    if isinstance(annotation, type) and issubclass(annotation, str) and issubclass(annotation, Enum):
        return _as_member(annotation)
    return None


def _install_plain_coercion() -> None:
    try:
        from typer._coercion import RuntimeParam, build_runtime_param

        param_class = typer.core._TyperParameter
        param_class.get_runtime_param  # noqa: B018  (the hook this replaces)
    except (ImportError, AttributeError):
        return

    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        fast: Any = None
        descriptor: Any = None

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            out = self.fast(value)
            if out is not _MISS:
                return out
            return build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self):
        if self._runtime_param is None:
            desc = self.type_descriptor
            info = desc.parameter_info
            custom = (
                desc.is_file or desc.is_ranged or getattr(info, "parser", None) or getattr(info, "click_type", None)
            )
            fast = None if custom else _plain_coercion(desc.annotation)
            # Even typer's own coercion is built only for a value that needs it: an option left at None never does.
            self._runtime_param = PlainRuntimeParam(info, desc.annotation, fast=fast or _never, descriptor=desc)
        return self._runtime_param

    # typer has no hook for its coercion: the method is replaced, as the help's type column is above.
    param_class.get_runtime_param = get_runtime_param  # type: ignore[method-assign]


_install_plain_coercion()


def _version(value: bool) -> None:
    if value:
        from .._version import __version__

        print(f"ckpt {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global_options(
    version: bool | None = typer.Option(
        None, "--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    no_progress: bool = typer.Option(
        False,
        "--no-progress",
        help="No progress bars (they show only on a terminal anyway). Also accepted after the command name.",
    ),
    quiet: bool = typer.Option(
        False,
        "--quiet",
        "-q",
        help="Print only the product (report, command, plan) and "
        "errors: no warnings, notes or progress. Also accepted after the command name.",
    ),
) -> None:
    """The checkpoint doctor for quantized LLMs: inspect, judge, repair and serve safetensors checkpoints."""
    if no_progress or quiet or not getattr(sys.stderr, "isatty", lambda: False)():
        os.environ["CKPT_NO_PROGRESS"] = "1"  # progress bars go to stderr, and only to a terminal
    State.quiet = quiet


def _split_global_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the global flags, the rest in order); a check-serve command's own words after `--` are never taken."""
    end = argv.index("--") if "--" in argv else len(argv)
    flags = [a for a in argv[:end] if a in GLOBAL_FLAGS]
    return flags, [a for a in argv[:end] if a not in GLOBAL_FLAGS] + argv[end:]


def hoist_global_flags(argv: list[str]) -> list[str]:
    """`ckpt doctor X -q` means `ckpt -q doctor X`: the global flags move before the command name (never from after a
    `--`, where a check-serve command's own words start)."""
    flags, rest = _split_global_flags(argv)
    return flags + rest if flags else argv


def note(text: str) -> None:
    """A warning, note or summary for people: stderr, and nothing with --quiet."""
    if State.quiet or not text:
        return
    sys.stderr.write(text if text.endswith("\n") else text + "\n")


def echo_first_line(text: str) -> str:
    """Replace a rendering's first line (`ckpt <command> <target>`) by the command line as given (every option)."""
    head, sep, rest = text.partition("\n")
    if State.argv is None or not head.startswith("ckpt "):
        return text
    # -q / --no-progress change what goes to stderr, never the product: `ckpt -q doctor X` prints what `ckpt doctor X`
    # prints, first line included.
    return shlex.join(["ckpt", *_split_global_flags(State.argv)[1]]) + sep + rest


def write_output(path: str, text: str) -> None:
    """`-o FILE`: one-line errors (exit 2) for a missing folder, a read-only place or a full disk."""
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except FileNotFoundError:
        folder = os.path.dirname(os.path.abspath(path))
        # A folder that exists but takes no new file (/proc, a read-only mount) also answers ENOENT.
        why = "is not writable" if os.path.isdir(folder) else "does not exist"
        raise UsageError(f"cannot write {path}: the folder {folder} {why}") from None
    except IsADirectoryError:
        raise UsageError(f"cannot write {path}: it is a folder; give a file name") from None
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


# `--format` of the commands that print a report: one member per name in report/renderers.py's list.
OutputFormat = Enum("OutputFormat", {name: name for name in OUTPUT_FORMATS}, type=str)  # type: ignore[misc]


class TextOrJson(str, Enum):
    """Commands whose output is a plan or a census, not a report: no markdown or SARIF rendering."""

    text = "text"
    json = "json"


def use_color(stream=None) -> bool:
    stream = stream or sys.stdout
    return (
        bool(getattr(stream, "isatty", lambda: False)())
        and "NO_COLOR" not in os.environ
        and os.environ.get("TERM") != "dumb"
    )


def emit(text: str) -> None:
    """Write the command's output. A reader that went away (`| head -1`) or a closed stdout is not an error of the
    command: the rest is discarded and the command still exits with its verdict (typer would exit 1 on EPIPE)."""
    if sys.stdout is None:
        return
    if State.interrupted:  # a Ctrl-C some library swallowed: the run ends as interrupted, without its product
        raise KeyboardInterrupt
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    except OSError as exc:  # a full disk (`> /dev/full`) or another write error: one line, exit 2
        _silence_stdout()
        reason = "the disk is full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
        raise UsageError(f"cannot write the output: {reason}") from None


def _silence_stdout() -> None:
    # Point stdout at /dev/null so the interpreter's final flush does not fail again.
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
