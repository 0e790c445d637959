from __future__ import annotations

import sys

import typer

from ..errors import UsageError
from .app import OutputFormat, app, echo_first_line, emit, keep_until_exit, use_color, write_output
from .options import TARGET_HELP, fail_on_option, hardware_ids, hardware_option, runtime_option, target_argument


@app.command(short_help="Judge a checkpoint: what vLLM will load, and every defect.")
def doctor(
    targets: list[str] = target_argument(
        TARGET_HELP[:-1] + "; several are judged one by one (Hub repos concurrently) with a summary table, one row "
        "per target (a target that cannot be read too), exit code the worst; with --pre-commit, the files to check."
    ),
    format: OutputFormat = typer.Option("text", "--format", "-f", help="Output format.", case_sensitive=False),
    fail_on: str = fail_on_option("error", "Exit 1 when a finding is at or above this (warn = warning)."),
    runtime: str | None = runtime_option(),
    hardware: list[str] | None = hardware_option("Kernel notes for these (default: all)."),
    headers_only: bool = typer.Option(False, "--headers-only", help="Read headers only; skip the scale-value scan."),
    producer_schema: bool = typer.Option(
        False,
        "--producer-schema",
        help="Also validate the quantization config with the producer's own code (needs the producers extra; imports torch).",
    ),
    output: str | None = typer.Option(None, "--output", "-o", help="Write the report to this file instead of stdout."),
    revision: str | None = typer.Option(
        None, "--revision", help="Hub repos: branch, tag or commit sha (default: main)."
    ),
    deep: bool = typer.Option(
        False,
        "--deep",
        help="Hub repos: also read the scale tensors' bytes for the value rules (local targets always do).",
    ),
    vllm: bool = typer.Option(
        False,
        "--vllm",
        help="Also load the headers with the installed vLLM's own code on the meta device (no weights read, no GPU "
        "memory; ~10 s, mostly importing vLLM): its verdict replaces the load model's. See docs/vllm-dry-run.md.",
    ),
    vllm_python: str | None = typer.Option(
        None,
        "--vllm-python",
        metavar="PATH",
        help="With --vllm: the Python interpreter that has vLLM (default: $CKPT_VLLM_PYTHON, else this one).",
    ),
    vllm_timeout: float | None = typer.Option(
        None,
        "--vllm-timeout",
        metavar="SECONDS",
        min=1,
        help="With --vllm: stop vLLM's dry run after this long (default: $CKPT_VLLM_TIMEOUT, else 300).",
    ),
    pre_commit: bool = typer.Option(
        False,
        "--pre-commit",
        help="TARGETs are files (as pre-commit passes them): check each checkpoint folder they "
        "belong to once, and explain Git LFS pointers instead of judging them.",
    ),
) -> None:
    """Judge a checkpoint: what vLLM will make of it, and every defect that breaks serving."""
    from ..pipeline import analyze  # the pipeline is imported when a command runs, not to print help
    from ..report.renderers import render, render_many

    if deep and headers_only:
        raise UsageError("--deep reads scale values and --headers-only skips them: choose one")
    dry_run = _dry_run_options(vllm, vllm_python, vllm_timeout, pre_commit)
    color = use_color() and output is None
    if pre_commit:
        from ..gates.precommit import check_files

        if revision:
            raise UsageError("--pre-commit checks the files in this work tree; --revision is for Hub repos")
        run = check_files(
            targets,
            runtime=runtime,
            hardware_ids=hardware_ids(hardware),
            headers_only=headers_only,
            producer_schema=producer_schema,
        )
        keep_until_exit(run)
        text = render_many(run.reports, format.value, color=color)
        code = run.exit_code(fail_on)
    elif len(targets) > 1:
        reports = _many(
            targets,
            runtime=runtime,
            hardware_ids=hardware_ids(hardware),
            headers_only=headers_only,
            producer_schema=producer_schema,
            deep=deep,
            revision=revision,
            vllm=dry_run,
        )
        keep_until_exit(reports)
        text = render_many(reports, format.value, color=color)
        if format.value in ("text", "markdown"):
            text += _summary_table(reports, fail_on, markdown=format.value == "markdown")
        code = max(r.exit_code(fail_on) for r in reports)
    else:
        result = analyze(
            targets[0],
            runtime=runtime,
            hardware_ids=hardware_ids(hardware),
            headers_only=headers_only,
            producer_schema=producer_schema,
            deep=deep,
            revision=revision,
            vllm=dry_run,
        )
        keep_until_exit(result)
        text = render(result.report, format.value, color=color)
        code = result.report.exit_code(fail_on)
    if format.value == "text" and not pre_commit and len(targets) == 1:
        text = echo_first_line(text)
    if output:
        write_output(output, text)
    elif text:
        emit(text)
    if pre_commit:
        _pre_commit_summary(run, fail_on)
    elif len(targets) > 1:
        _unreadable_lines(reports)
    raise typer.Exit(code)


def _unreadable_lines(reports) -> None:
    """Exit 2 always comes with its `ckpt: ...` line on stderr (even with -q): one per target that could not be read,
    for a log that keeps stderr only."""
    from ..report.model import Unreadable

    for r in reports:
        if isinstance(r, Unreadable):
            print(f"ckpt: {r.target}: {r.error}", file=sys.stderr)


def _dry_run_options(vllm: bool, python: str | None, timeout: float | None, pre_commit: bool):
    """`--vllm`'s options, or None without it (its companions alone are a usage error)."""
    if not vllm:
        if python is not None or timeout is not None:
            raise UsageError("--vllm-python and --vllm-timeout apply to --vllm")
        return None
    if pre_commit:
        raise UsageError("--vllm runs vLLM for each checkpoint (seconds each); run it outside --pre-commit")
    from ..vllm_dry.run import DryRunOptions

    return DryRunOptions(python=python, timeout=timeout)


def _pre_commit_summary(run, fail_on: str) -> None:
    """One closing line on stderr, the part of a failed hook's output a committer reads first."""
    failing = run.failing(fail_on)
    if not run.reports:
        print(f"ckpt: no checkpoint folder among {len(run.ignored)} file(s); nothing to check", file=sys.stderr)
    elif failing:
        print(
            f"ckpt: {len(failing)} of {len(run.reports)} checkpoint folder(s) fail --fail-on {fail_on}: "
            f"{', '.join(failing)}",
            file=sys.stderr,
        )


def _many(targets: list[str], **options) -> list:
    """Every target judged, in the order given; Hub targets (network round trips) concurrently. A target that cannot
    be read (missing, not a checkpoint, Hub unreachable) is an `Unreadable` entry with its one-line reason: the others
    are still judged, and the exit code is 2."""
    from concurrent.futures import ThreadPoolExecutor

    from ..errors import CkptError
    from ..pipeline import analyze
    from ..report.model import Unreadable

    def one(target: str):
        try:
            return analyze(target, **options).report
        except CkptError as exc:
            return Unreadable(target, str(exc).removeprefix(f"{target}: "))  # the target has a column of its own

    remote = [t for t in targets if _is_hub(t)]
    if not remote:
        return [one(t) for t in targets]
    with ThreadPoolExecutor(max_workers=min(8, len(remote))) as pool:
        futures = {t: pool.submit(one, t) for t in remote}
        return [futures[t].result() if t in futures else one(t) for t in targets]


def _is_hub(target: str) -> bool:
    from ..errors import CkptError
    from ..read.hub_target import parse_hub_target

    try:
        return parse_hub_target(target) is not None
    except CkptError:  # a malformed hf:// target: `analyze` reports it as the target's reason
        return False


def _summary_table(reports, fail_on: str, *, markdown: bool) -> str:
    """One line per target: the counts and whether it fails --fail-on, or why it could not be read; the exit code is
    the worst of them (2 when a target could not be read)."""
    from ..report.model import Unreadable

    rows = [
        (r.target, "-", "-", "-", f"could not be read: {r.error}")
        if isinstance(r, Unreadable)
        else (
            r.target,
            str(r.summary["error"]),
            str(r.summary["warning"]),
            str(r.summary["info"]),
            "FAIL" if r.exit_code(fail_on) else "ok",
        )
        for r in reports
    ]
    head = ("target", "errors", "warnings", "info", f"--fail-on {fail_on}")
    if markdown:
        lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    lines = ["", "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines) + "\n"
