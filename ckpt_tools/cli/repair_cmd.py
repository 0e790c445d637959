from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import typer

from ..errors import UsageError
from .app import State, TextOrJson, app, echo_first_line, emit, keep_until_exit
from .options import LOCAL_TARGET_HELP, fail_on_option, runtime_option, target_argument

DRY_RUN = typer.Option(
    False, "--dry-run", "-n", help="Print the plan (per file: what changes, bytes to write); change nothing."
)
FAIL_ON = fail_on_option(
    "none", "Exit 1 when doctor, run after the repair, finds something at or above this (default: never)."
)
RUNTIME = runtime_option()
PROGRESS = typer.Option(
    None, "--progress/--no-progress", help="Progress bar for shard rewrites (default: on a terminal)."
)
TARGET = target_argument(LOCAL_TARGET_HELP)


FORMAT = typer.Option(TextOrJson.text, "--format", "-f", help="text or json.", case_sensitive=False)
HEADERS_ONLY = typer.Option(
    False,
    "--headers-only",
    help="Skip the scale-value scan: the before / after verdicts "
    "then skip the value rules (faster on big checkpoints).",
)
FORCE = typer.Option(
    False,
    "--force",
    help="Apply the repair even when doctor on the planned headers has more errors "
    "than now (without it such a repair refuses, exit 2).",
)


@contextmanager
def resume_hint(target: str) -> Iterator[None]:
    """A repair command's body: when Ctrl-C stops it after its journal was written, `ckpt: interrupted` is followed
    by the two commands that finish or undo it (the journal is the record `ckpt repair` works from)."""
    try:
        yield
    finally:
        if State.interrupted:
            State.interrupt_hints.extend(_journal_hint(target))


def _journal_hint(target: str) -> list[str]:
    from ..errors import CkptError
    from ..repair.guard import resolve_local
    from ..repair.journal import journal_path

    try:
        root = resolve_local(target).root
    except CkptError:
        return []
    if not journal_path(root).exists():
        return []
    folder = shlex.quote(str(root))
    return [
        f"ckpt: the repair of {root} stopped part-way and left its journal; finish it with "
        f"`ckpt repair --resume {folder}`, or undo it with `ckpt repair --rollback {folder}`"
    ]


def _finish(result, format: TextOrJson, fail_on: str) -> None:
    import sys

    from ..repair.render import render_result

    emit(
        orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"
        if format == TextOrJson.json
        else echo_first_line(render_result(result))
    )
    if result.dry_run and result.worse:
        # The run itself would refuse: a dry run exits as it would (2), with the reason on stderr.
        print(
            f"ckpt: {result.job} would make the checkpoint worse: {result.before.summary['error']} -> "
            f"{result.predicted.summary['error']} error(s); the repair refuses without --force",
            file=sys.stderr,
        )
        raise typer.Exit(2)
    raise typer.Exit(result.verdict.exit_code(fail_on))


@app.command("fix-prefix", short_help="Rename tensors to the prefix the architecture loads.")
def fix_prefix_command(
    target: str = TARGET,
    old: list[str] | None = typer.Option(None, "--from", help="Prefix to rename from (with --to; repeatable)."),
    new: list[str] | None = typer.Option(None, "--to", help="Prefix to rename to; empty removes the prefix."),
    dry_run: bool = DRY_RUN,
    headers_only: bool = HEADERS_ONLY,
    force: bool = FORCE,
    format: TextOrJson = FORMAT,
    fail_on: str = FAIL_ON,
    runtime: str | None = RUNTIME,
    progress: bool | None = PROGRESS,
) -> None:
    """Rename tensors to the prefix the architecture loads (the misnested-prefix finding's plan, or --from/--to) in
    every shard header and the index. Weight bytes are not touched."""
    from ..repair import fix_prefix, run

    old, new = old or [], new or []
    if len(old) != len(new):
        raise UsageError("give --from and --to in pairs (one --to per --from)")
    with resume_hint(target):
        result = run(
            target,
            fix_prefix.job(list(zip(old, new, strict=True))),
            dry_run=dry_run,
            progress=progress,
            runtime=runtime,
            force=force,
            headers_only=headers_only,
            keep=keep_until_exit,
        )
    _finish(result, format, fail_on)


@app.command("scrub-nan", short_help="Overwrite NaN bytes of FP8 scale tensors in place.")
def scrub_nan_command(
    target: str = TARGET,
    value: str = typer.Option(
        "max",
        "--value",
        help="Replacement: `max` (largest finite value: E4M3 0x7E = 448, "
        "what current ModelOpt clamps to) or `zero` (silences the "
        "block).",
    ),
    dry_run: bool = DRY_RUN,
    force: bool = FORCE,
    format: TextOrJson = FORMAT,
    fail_on: str = FAIL_ON,
    runtime: str | None = RUNTIME,
) -> None:
    """Overwrite NaN bytes of FP8 scale tensors (E4M3 0x7F/0xFF) in place; only those bytes change. Reports the
    count per tensor."""
    from ..repair import run, scrub_nan

    with resume_hint(target):
        result = run(target, scrub_nan.job(value), dry_run=dry_run, runtime=runtime, force=force, keep=keep_until_exit)
    _finish(result, format, fail_on)


@app.command("drop-orphans", short_help="Remove orphan scale tensors from headers and index.")
def drop_orphans_command(
    target: str = TARGET,
    tensor: list[str] | None = typer.Option(
        None, "--tensor", "-t", help="Drop this scale tensor (repeatable) instead of the orphan-scale finding's."
    ),
    dry_run: bool = DRY_RUN,
    headers_only: bool = HEADERS_ONLY,
    force: bool = FORCE,
    format: TextOrJson = FORMAT,
    fail_on: str = FAIL_ON,
    runtime: str | None = RUNTIME,
    progress: bool | None = PROGRESS,
) -> None:
    """Remove orphan scale tensors from the shard headers and the index (affected shards are rebuilt atomically)."""
    from ..repair import drop_orphans, run

    with resume_hint(target):
        result = run(
            target,
            drop_orphans.job(tensor or []),
            dry_run=dry_run,
            progress=progress,
            runtime=runtime,
            force=force,
            headers_only=headers_only,
            keep=keep_until_exit,
        )
    _finish(result, format, fail_on)


@app.command("fix", short_help="Apply every automatic repair, then report what is left.")
def fix_command(
    target: str = TARGET,
    dry_run: bool = DRY_RUN,
    force: bool = FORCE,
    format: TextOrJson = FORMAT,
    fail_on: str = fail_on_option(
        "error",
        "Exit 1 when a finding at or above this is left after the repairs (predicted on a dry run); none: never.",
    ),
    runtime: str | None = RUNTIME,
    progress: bool | None = PROGRESS,
) -> None:
    """Apply every automatic repair the doctor finds, in a safe order: scrub-nan, fix-prefix, drop-orphans; then
    list every finding left (on a dry run: the predicted end state of the whole chain) and exit by it."""
    from ..repair.fix_all import fix_all
    from ..repair.render import render_fix_all

    with resume_hint(target):
        result = fix_all(target, dry_run=dry_run, progress=progress, runtime=runtime, force=force, keep=keep_until_exit)
    if format == TextOrJson.json:
        emit(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        emit(echo_first_line(render_fix_all(result)))
    raise typer.Exit(result.verdict.exit_code(fail_on))
