from __future__ import annotations

import os
import sys

import typer

from ..errors import UsageError
from .app import FailOn, Format, app, echo_first_line, emit, keep_until_exit, use_color, write_output


@app.command()
def doctor(
    targets: list[str] = typer.Argument(
        ...,
        metavar="TARGET",
        help="Checkpoint folder, .safetensors file, or Hub repo (org/name, org/name@revision, "
        "hf://org/name); several are judged one by one (Hub repos concurrently) with a summary table, exit code the "
        "worst; with --pre-commit, the files to check.",
    ),
    format: Format = typer.Option(Format.text, "--format", "-f", help="Output format.", case_sensitive=False),
    fail_on: FailOn = typer.Option(
        FailOn.error, "--fail-on", help="Exit 1 when a finding is at or above this.", case_sensitive=False
    ),
    runtime: str | None = typer.Option(
        None, "--runtime", help="Runtime profile from rules/runtimes/ (default {default_runtime})."
    ),
    hardware: list[str] | None = typer.Option(
        None,
        "--hardware",
        help="Hardware profile for kernel notes, any case: gb10, rtx5090, b200, h200, h100 (repeatable; default: all).",
    ),
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
    from ..report.formats import render, render_many

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
            hardware_ids=hardware or (),
            headers_only=headers_only,
            producer_schema=producer_schema,
        )
        keep_until_exit(run)
        text = render_many(run.reports, format.value, color=color)
        code = run.exit_code(fail_on.value)
    elif len(targets) > 1:
        reports = _many(
            targets,
            runtime=runtime,
            hardware_ids=hardware or (),
            headers_only=headers_only,
            producer_schema=producer_schema,
            deep=deep,
            revision=revision,
            vllm=dry_run,
        )
        keep_until_exit(reports)
        text = render_many(reports, format.value, color=color)
        if format in (Format.text, Format.markdown):
            text += _summary_table(reports, fail_on.value, markdown=format == Format.markdown)
        code = max(r.exit_code(fail_on.value) for r in reports)
    else:
        result = analyze(
            targets[0],
            runtime=runtime,
            hardware_ids=hardware or (),
            headers_only=headers_only,
            producer_schema=producer_schema,
            deep=deep,
            revision=revision,
            vllm=dry_run,
        )
        keep_until_exit(result)
        text = render(result.report, format.value, color=color)
        code = result.report.exit_code(fail_on.value)
    if format == Format.text and not pre_commit and len(targets) == 1:
        text = echo_first_line(text)
    if output:
        write_output(output, text)
    elif text:
        emit(text)
    if pre_commit:
        _pre_commit_summary(run, fail_on.value)
    raise typer.Exit(code)


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
    """Every target judged, in the order given; Hub targets (network round trips) concurrently. A target that cannot be
    read stops the command (exit 2) naming it, as a single target does."""
    from concurrent.futures import ThreadPoolExecutor

    from ..errors import CkptError
    from ..pipeline import analyze

    def one(target: str):
        try:
            return analyze(target, **options).report
        except CkptError as exc:
            raise type(exc)(f"{exc}" if str(exc).startswith(target) else f"{target}: {exc}") from None

    remote = [t for t in targets if not os.path.exists(t)]
    if not remote:
        return [one(t) for t in targets]
    with ThreadPoolExecutor(max_workers=min(8, len(remote))) as pool:
        futures = {t: pool.submit(one, t) for t in remote}
        return [futures[t].result() if t in futures else one(t) for t in targets]


def _summary_table(reports, fail_on: str, *, markdown: bool) -> str:
    """One line per target: the counts and whether it fails --fail-on; the exit code is the worst of them."""
    rows = [
        (
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
