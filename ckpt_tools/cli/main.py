"""Entry point of the `ckpt` console script: one-line errors and exit 2 instead of tracebacks."""

from __future__ import annotations

import gc
import os
import signal
import sys


def _interrupted_at_startup(signum, frame) -> None:
    # Ctrl-C while the commands are still being imported: the same line and code as later, no traceback.
    sys.stderr.write("ckpt: interrupted\n")
    os._exit(130)


def main() -> None:
    signal.signal(signal.SIGINT, _interrupted_at_startup)
    # One command per process, allocating a few objects per tensor and freeing them only at exit: the cyclic
    # collector would re-walk all of them many times (the pipeline pauses it too), and once more at interpreter exit
    # unless they are frozen. Reference counting frees memory as usual.
    gc.disable()
    try:
        _run()
    finally:
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
    try:
        # From here on Ctrl-C raises KeyboardInterrupt, which the handlers below turn into one line and exit 130
        # (switched inside the `try`: a Ctrl-C landing on the switch itself is caught too).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _invoke(app, hoist_global_flags(sys.argv[1:]))
    except CkptError as exc:
        print(f"ckpt: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("ckpt: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except SystemExit as exc:
        if exc.code == 130:  # typer turns a KeyboardInterrupt inside a command into a silent exit 130
            print("ckpt: interrupted", file=sys.stderr)
        raise
    except BrokenPipeError:
        raise SystemExit(0) from None
    except Exception as exc:  # a bug of ours: still one line, still exit 2
        if os.environ.get("CKPT_DEBUG"):
            raise
        print(f"ckpt: internal error: {type(exc).__name__}: {exc} (set CKPT_DEBUG=1 for a traceback)", file=sys.stderr)
        raise SystemExit(2) from None


def _invoke(app, args: list[str]) -> None:
    from .app import State

    try:
        app(args=args, prog_name="ckpt")
    finally:
        State.argv = None  # an embedding process may invoke the app again, another way


def __getattr__(name: str):
    """`from ckpt_tools.cli.main import app`: the typer app with every command registered (for tests and embedding)."""
    if name != "app":
        raise AttributeError(name)
    from . import doctor, inspect_cmd, plan_cmd, repair_cmd, resume_cmd, rules_cmd, serve_cmd  # noqa: F401
    from .app import app

    return app


if __name__ == "__main__":
    console()
