from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import UsageError
from ..pipeline import analyze
from ..report.formats import render
from .app import FailOn, Format, app, emit, use_color


@app.command()
def doctor(
    target: str = typer.Argument(..., help="Checkpoint folder, .safetensors file, or Hub repo (org/name, org/name@revision, hf://org/name)."),
    format: Format = typer.Option(Format.text, "--format", "-f", help="Output format."),
    fail_on: FailOn = typer.Option(FailOn.error, "--fail-on", help="Exit 1 when a finding is at or above this."),
    runtime: Optional[str] = typer.Option(None, "--runtime", help="Runtime profile from rules/runtimes/ (default vllm-0.33)."),
    hardware: Optional[List[str]] = typer.Option(None, "--hardware", help="Hardware profile(s) for kernel notes (default: all)."),
    headers_only: bool = typer.Option(False, "--headers-only", help="Read headers only; skip the scale-value scan."),
    producer_schema: bool = typer.Option(
        False, "--producer-schema", help="Also validate the quantization config with the producer's own code (needs the producers extra; imports torch)."
    ),
    output: Optional[str] = typer.Option(None, "--output", "-o", help="Write the report to this file instead of stdout."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Hub repos: branch, tag or commit sha (default: main)."),
    deep: bool = typer.Option(False, "--deep", help="Hub repos: also read the scale tensors' bytes for the value rules (local targets always do)."),
) -> None:
    """Judge a checkpoint: what vLLM will make of it, and every defect that breaks serving."""
    if deep and headers_only:
        raise UsageError("--deep reads scale values and --headers-only skips them: choose one")
    result = analyze(target, runtime=runtime, hardware_ids=hardware or (), headers_only=headers_only,
                     producer_schema=producer_schema, deep=deep, revision=revision)
    text = render(result.report, format.value, color=use_color() and output is None)
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        emit(text)
    raise typer.Exit(result.report.exit_code(fail_on.value))
