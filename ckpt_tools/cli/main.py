"""Entry point of the `ckpt` console script: one-line errors and exit 2 instead of tracebacks."""

from __future__ import annotations

import gc
import os
import sys

from ..errors import CkptError
from . import doctor, inspect_cmd, plan_cmd, repair_cmd, resume_cmd, rules_cmd, serve_cmd  # noqa: F401  (commands register on import)
from .app import app


def main() -> None:
    # One command per process, allocating a few objects per tensor and freeing them only at exit: the cyclic
    # collector would re-walk all of them many times (the pipeline pauses it too), and once more at interpreter exit
    # unless they are frozen. Reference counting frees memory as usual.
    gc.disable()
    try:
        _run()
    finally:
        gc.freeze()


def _run() -> None:
    try:
        app()
    except CkptError as exc:
        print(f"ckpt: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("ckpt: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except BrokenPipeError:
        raise SystemExit(0) from None
    except Exception as exc:  # a bug of ours: still one line, still exit 2
        if os.environ.get("CKPT_DEBUG"):
            raise
        print(f"ckpt: internal error: {type(exc).__name__}: {exc} (set CKPT_DEBUG=1 for a traceback)", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
