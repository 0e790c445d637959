"""Entry point of the `ckpt` console script: one-line errors and exit 2 instead of tracebacks."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys


def _interrupted_at_startup(signum, frame) -> None:
    # Ctrl-C while the commands are still being imported: the same line and code as later, no traceback.
    sys.stderr.write("ckpt: interrupted\n")
    os._exit(130)


def _quiet_interrupt(unraisable) -> None:
    """A Ctrl-C that lands where Python cannot raise it (a weakref callback of the import system, a `__del__`) would
    be printed as "Exception ignored ... KeyboardInterrupt"; the run still ends as interrupted (`_interrupt` remembers
    it), with its one line. Anything else is reported as Python reports it."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def main() -> None:
    signal.signal(signal.SIGINT, _interrupted_at_startup)
    # One command per process, allocating a few objects per tensor and freeing them only at exit: the cyclic
    # collector would re-walk all of them many times (the pipeline pauses it too), and once more at interpreter exit
    # unless they are frozen. Reference counting frees memory as usual.
    gc.disable()
    previous_hook, sys.unraisablehook = sys.unraisablehook, _quiet_interrupt
    try:
        _run()
    finally:
        sys.unraisablehook = previous_hook
        gc.freeze()


def console() -> None:
    """The `ckpt` command (and `python -m ckpt_tools.cli.main`): `main()` in a process of its own, so a read-only
    command may leave its analysis to process exit (`app.keep_until_exit`): `main()` freezes every object before the
    interpreter exits, so nothing kept is torn down object by object. In-process callers of `main()` (tests, an
    embedding program) run many commands in one process and free each analysis as usual."""
    # First, before the app is imported: from here until the command's own KeyboardInterrupt handling takes over,
    # Ctrl-C ends the process with the one line and exit 130 (only the interpreter's start-up, before this module
    # runs, is left to Python's default).
    signal.signal(signal.SIGINT, _interrupted_at_startup)
    from .app import State

    State.own_process = True
    main()


def _interrupt(signum, frame) -> None:
    """Ctrl-C while a command runs: remembered, then raised as KeyboardInterrupt. Remembered because Python may wrap
    the exception (`RuntimeError: Error calling __set_name__` when it lands in a class body being imported) or a
    library may swallow it; `_settle` still ends such a run as interrupted."""
    from .app import State

    State.interrupted = True
    if not State.settling:
        raise KeyboardInterrupt


def _run() -> None:
    try:
        from ..errors import CkptError
        from . import (  # noqa: F401  (commands register on import)
            doctor,
            inspect_cmd,
            plan_cmd,
            repair_cmd,
            resume_cmd,
            rules_cmd,
            serve_cmd,
        )
        from .app import State, app, hoist_global_flags
    except KeyboardInterrupt:  # pragma: no cover - the handler above normally wins
        _interrupted_at_startup(signal.SIGINT, None)
    State.argv = list(sys.argv[1:])
    State.interrupted = State.settling = False
    State.interrupt_hints = []
    code: int | str | None = 0
    message: str | None = None
    try:
        try:
            # From here on Ctrl-C raises KeyboardInterrupt, which the handlers below turn into one line and exit 130
            # (switched inside the `try`: a Ctrl-C landing on the switch itself is caught too).
            signal.signal(signal.SIGINT, _interrupt)
            _invoke(app, hoist_global_flags(sys.argv[1:]))
        finally:
            # First, and no call before it: a Ctrl-C is raised only inside the command (caught below); from here on
            # it is only remembered (`_interrupt`), so none of the handlers below is interrupted half-way.
            State.settling = True
    except CkptError as exc:
        code, message = 2, f"ckpt: {exc}"
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:
        code = exc.code  # typer turns a KeyboardInterrupt inside a command into exit 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # a bug of ours: still one line, still exit 2
        if _raised_by_interrupt(exc):
            code = 130
        elif os.environ.get("CKPT_DEBUG"):
            raise
        else:
            code = 2
            message = f"ckpt: internal error: {type(exc).__name__}: {exc} (set CKPT_DEBUG=1 for a traceback)"
    _settle(code, message)


def _raised_by_interrupt(exc: BaseException) -> bool:
    """A KeyboardInterrupt Python wrapped in another exception (a class body's `__set_name__`, an import)."""
    seen = 0
    cause: BaseException | None = exc
    while cause is not None and seen < 20:
        if isinstance(cause, KeyboardInterrupt):
            return True
        cause, seen = cause.__cause__ or cause.__context__, seen + 1
    return False


def _settle(code: int | str | None, message: str | None) -> None:
    """End the command: as interrupted (one line, the repair hints, exit 130) when a Ctrl-C arrived at any point,
    even one a library swallowed or Python wrapped; else with its own code and message. A Ctrl-C from here on is
    only remembered (`State.settling`), then ignored: the verdict is settled, and the run ends with it."""
    from .app import State

    if code == 130 or State.interrupted:
        code, message = 130, "\n".join(["ckpt: interrupted", *State.interrupt_hints])
    if State.own_process:
        # Ignored, not handled: during the interpreter's exit Python puts a handled signal back to its default
        # action, and a Ctrl-C there would kill the process after its verdict was printed. An ignored one stays so.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:  # an embedding process gets its Ctrl-C back
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if message:
        print(message, file=sys.stderr)
    if code == 130 and State.own_process:
        # Not `SystemExit(130)`: under `python -m`, CPython ends a run whose KeyboardInterrupt was raised inside
        # exec'd source (the methods `dataclasses` generates while a module is imported) by killing itself with
        # SIGINT at exit, although it was handled. Nothing of ours runs at exit (no atexit hooks; locks and
        # temporary files are released by their `with` blocks), so an interrupted run ends now, streams flushed.
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        os._exit(130)
    raise SystemExit(code)


def _invoke(app, args: list[str]) -> None:
    """Run the app; a usage mistake click finds (an unknown option, a missing argument, a bad choice) is one line,
    `ckpt: ...`, exit 2, as every other bad input."""
    import typer

    from ..errors import UsageError
    from .app import State

    # click's UsageError, whichever copy typer runs on (recent typer releases vendor click): BadParameter's base.
    click_usage_error: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
    try:
        code = app(args=args, prog_name="ckpt", standalone_mode=False)
    except click_usage_error as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `ckpt`: the help, as before
            exc.show()  # type: ignore[attr-defined]
            raise SystemExit(2) from None
        ctx = getattr(exc, "ctx", None)
        where = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
        raise UsageError(f"{exc.format_message().rstrip('.')}{where}") from None  # type: ignore[attr-defined]
    except typer.Abort:
        raise KeyboardInterrupt from None
    finally:
        State.argv = None  # an embedding process may invoke the app again, another way
    if isinstance(code, int) and code:  # without standalone mode, click returns the code of `typer.Exit`
        raise SystemExit(code)


def __getattr__(name: str):
    """`from ckpt_tools.cli.main import app`: the typer app with every command registered (for tests and embedding)."""
    if name != "app":
        raise AttributeError(name)
    from . import doctor, inspect_cmd, plan_cmd, repair_cmd, resume_cmd, rules_cmd, serve_cmd  # noqa: F401
    from .app import app

    return app


if __name__ == "__main__":
    console()
