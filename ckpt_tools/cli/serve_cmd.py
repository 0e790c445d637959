"""`ckpt serve-flags` and `ckpt check-serve`: parse options, call ckpt_tools.serve, print."""

from __future__ import annotations

from enum import Enum

import typer

from .app import OutputFormat, State, TextOrJson, app, echo_first_line, emit, keep_until_exit, note, use_color
from .options import fail_on_option, hardware_option, one_hardware, runtime_option, target_argument


class Emit(str, Enum):
    argv = "argv"
    docker = "docker"
    compose = "compose"
    model_card = "model-card"


@app.command("serve-flags", short_help="The exact `vllm serve` command for a checkpoint.")
def serve_flags_command(
    target: str = target_argument(),
    runtime: str | None = runtime_option(
        "Runtime profile (default {default_runtime}; image profiles: {other_runtimes})."
    ),
    hardware_given: list[str] | None = hardware_option("One profile (default: the runtime image's own hardware)."),
    drafter: str | None = typer.Option(
        None, "--drafter", help="DFlash / EAGLE / MTP drafter checkpoint folder (also inspected)."
    ),
    speculative_method: str | None = typer.Option(
        None, "--speculative-method", help="Override the drafter's detected method."
    ),
    max_model_len: int | None = typer.Option(
        None, "--max-model-len", help="Context length (default: the checkpoint's)."
    ),
    colocated: bool = typer.Option(False, "--colocated", help="Leave GPU memory for sidecars (ASR/TTS/embeddings)."),
    tensor_parallel_size: int | None = typer.Option(
        None,
        "--tensor-parallel-size",
        "-tp",
        help="GPUs the model is split over (emitted as asked; the memory plan is per GPU).",
    ),
    emit_as: Emit = typer.Option(
        Emit.argv,
        "--emit",
        help="What to print: the command line, a docker run, a compose service or a model-card section.",
        case_sensitive=False,
    ),
    format: TextOrJson = typer.Option(TextOrJson.text, "--format", "-f", help="text or json.", case_sensitive=False),
    explain: bool = typer.Option(False, "--explain", help="The reason and source of every flag."),
    fail_on: str = fail_on_option(
        "error",
        "Print no command (exit 1) when the checkpoint or the command has a finding at or above this (warn = "
        "warning); none: always print it.",
    ),
    headers_only: bool = typer.Option(False, "--headers-only", help="Read headers only; skip the scale-value scan."),
    deep: bool = typer.Option(
        False, "--deep", help="Hub repos: also read the scale tensors' bytes for the value rules."
    ),
    revision: str | None = typer.Option(None, "--revision", help="Hub repos: branch, tag or commit sha."),
    repo_id: str | None = typer.Option(
        None,
        "--repo-id",
        help="Hub repo (org/name) the docker / compose / "
        "model-card recipes serve (default: the target's, when it is a Hub repo, a "
        "Hub cache snapshot or a Hub clone; else the /model mount from $MODEL_DIR).",
    ),
    served_model_name: str | None = typer.Option(
        None,
        "--served-model-name",
        help="Name clients request (default in recipes: the repo id, else the folder's name).",
    ),
) -> None:
    """The exact `vllm serve` flags for a checkpoint on a runtime image and GPU. stdout carries only the command (a
    script can do `cmd=$(ckpt serve-flags ...)`); findings and warnings go to stderr. Exit 1, and no command, when
    the checkpoint or the command has a finding at or above --fail-on (the same verdict as doctor and check-serve)."""
    import sys

    from ..errors import UsageError
    from ..serve import emitters, serve_flags

    if deep and headers_only:
        raise UsageError("--deep reads scale values and --headers-only skips them: choose one")
    hardware = one_hardware(hardware_given, "serve-flags")
    container = emit_as != Emit.argv
    plan = serve_flags(
        target,
        runtime=runtime,
        hardware=hardware,
        drafter=drafter,
        max_model_len=max_model_len,
        colocated=colocated,
        container=container,
        speculative_method=speculative_method,
        headers_only=headers_only,
        deep=deep,
        revision=revision,
        repo_id=repo_id,
        served_model_name=served_model_name,
        keep=keep_until_exit,
        tensor_parallel_size=tensor_parallel_size,
    )
    code = plan.exit_code(fail_on)
    if format == TextOrJson.json:
        emit(emitters.json_report(plan))  # the JSON carries the verdict itself
        raise typer.Exit(code)
    if code == 0:
        if emit_as == Emit.argv:
            emit(echo_first_line(emitters.text(plan, explain=True)) if explain else emitters.argv_line(plan))
        else:
            emit(emitters.EMITTERS[emit_as.value](plan))
            if explain:
                emit(echo_first_line(emitters.text(plan, explain=True)))
    if code:
        sys.stderr.write(emitters.diagnostics(plan, fail_on, quiet=State.quiet))
        if plan.memory is not None and plan.blocked and not plan.memory.answers.fits:
            from ..plan.render import answer_lines, summary_lines

            sys.stderr.write(
                "\n".join(
                    [
                        "ckpt: the checkpoint does not fit:",
                        *(f"  {ln}" for ln in summary_lines(plan.memory) + answer_lines(plan.memory)),
                    ]
                )
                + "\n"
            )
    elif not explain:  # --explain already lists the findings and warnings in the text asked for
        note(emitters.diagnostics(plan, fail_on))
    raise typer.Exit(code)


@app.command("check-serve", short_help="Lint a `vllm serve` / `docker run` command against it.")
def check_serve_command(
    target: str = target_argument(),
    command: list[str] = typer.Argument(
        None, metavar="COMMAND", help="The command, after `--` (or one quoted string)."
    ),
    runtime: str | None = runtime_option("Runtime profile (default: from the docker image, else {default_runtime})."),
    hardware_given: list[str] | None = hardware_option("One profile, the one the command runs on."),
    format: OutputFormat = typer.Option("text", "--format", "-f", help="Output format.", case_sensitive=False),
    fail_on: str = fail_on_option("error", "Exit 1 when a finding is at or above this (warn = warning)."),
    headers_only: bool = typer.Option(False, "--headers-only", help="Read headers only; skip the scale-value scan."),
) -> None:
    """Lint a `vllm serve` or `docker run` command against the checkpoint and the runtime/hardware profiles; the
    report also carries doctor's findings on the checkpoint (one verdict)."""
    from ..report.renderers import render
    from ..serve import check_serve

    if not command:
        from ..errors import UsageError

        raise UsageError("no command to check: pass it after `--`, e.g. `ckpt check-serve MODEL -- vllm serve ...`")
    result = check_serve(
        target,
        command,
        runtime=runtime,
        hardware=one_hardware(hardware_given, "check-serve"),
        headers_only=headers_only,
        keep=keep_until_exit,
    )
    text = render(result.report, format.value, color=use_color())
    emit(echo_first_line(text) if format.value == "text" else text)
    raise typer.Exit(result.report.exit_code(fail_on))
