from __future__ import annotations

import sys
from typing import List, Optional

import typer

from ..errors import UsageError
from ..pipeline import analyze
from ..report.formats import render, render_many
from .app import FailOn, Format, app, echo_first_line, emit, use_color, write_output


@app.command()
def doctor(
    targets: List[str] = typer.Argument(
        ..., metavar="TARGET", help="Checkpoint folder, .safetensors file, or Hub repo (org/name, org/name@revision, "
        "hf://org/name); with --pre-commit, the files to check."
    ),
    format: Format = typer.Option(Format.text, "--format", "-f", help="Output format.", case_sensitive=False),
    fail_on: FailOn = typer.Option(FailOn.error, "--fail-on", help="Exit 1 when a finding is at or above this.",
                                    case_sensitive=False),
    runtime: Optional[str] = typer.Option(None, "--runtime", help="Runtime profile from rules/runtimes/ (default vllm-0.33)."),
    hardware: Optional[List[str]] = typer.Option(None, "--hardware", help="Hardware profile for kernel notes, any case: gb10, rtx5090, b200, h200, h100 (repeatable; default: all)."),
    headers_only: bool = typer.Option(False, "--headers-only", help="Read headers only; skip the scale-value scan."),
    producer_schema: bool = typer.Option(
        False, "--producer-schema", help="Also validate the quantization config with the producer's own code (needs the producers extra; imports torch)."
    ),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the report to this file instead of stdout."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Hub repos: branch, tag or commit sha (default: main)."),
    deep: bool = typer.Option(False, "--deep", help="Hub repos: also read the scale tensors' bytes for the value rules (local targets always do)."),
    pre_commit: bool = typer.Option(
        False, "--pre-commit", help="TARGETs are files (as pre-commit passes them): check each checkpoint folder they "
        "belong to once, and explain Git LFS pointers instead of judging them."
    ),
) -> None:
    """Judge a checkpoint: what vLLM will make of it, and every defect that breaks serving."""
    if deep and headers_only:
        raise UsageError("--deep reads scale values and --headers-only skips them: choose one")
    color = use_color() and output is None
    if pre_commit:
        from ..gates.precommit import check_files

        if revision:
            raise UsageError("--pre-commit checks the files in this work tree; --revision is for Hub repos")
        run = check_files(targets, runtime=runtime, hardware_ids=hardware or (), headers_only=headers_only,
                          producer_schema=producer_schema)
        text = render_many(run.reports, format.value, color=color)
        code = run.exit_code(fail_on.value)
    else:
        if len(targets) > 1:
            raise UsageError(f"doctor takes one TARGET, got {len(targets)} (use --pre-commit to pass a list of files)")
        result = analyze(targets[0], runtime=runtime, hardware_ids=hardware or (), headers_only=headers_only,
                         producer_schema=producer_schema, deep=deep, revision=revision)
        text = render(result.report, format.value, color=color)
        code = result.report.exit_code(fail_on.value)
    if format == Format.text and not pre_commit:
        text = echo_first_line(text)
    if output:
        write_output(output, text)
    elif text:
        emit(text)
    if pre_commit:
        _pre_commit_summary(run, fail_on.value)
    raise typer.Exit(code)


def _pre_commit_summary(run, fail_on: str) -> None:  # noqa: ANN001 - GateRun
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
