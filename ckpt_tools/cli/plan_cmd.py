"""`ckpt plan`: will the checkpoint fit on this hardware, with how much context and how many sequences."""

from __future__ import annotations

import orjson
import typer

from ..errors import UsageError
from .app import TextOrJson, app, emit, note
from .options import fail_on_option, hardware_option, one_hardware, runtime_option, target_argument


@app.command("plan", short_help="Memory plan: does it fit, with what context and batch.")
def plan_command(
    target: str = target_argument(),
    hardware_given: list[str] | None = hardware_option("One profile (default: the runtime image's own hardware)."),
    tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", help="GPUs the model is split over."),
    kv_cache_dtype: str | None = typer.Option(
        None,
        "--kv-cache-dtype",
        help="auto (the checkpoint's config and vLLM choose), bfloat16, fp8, fp8_e4m3, nvfp4, ...",
    ),
    max_model_len: int | None = typer.Option(
        None, "--max-model-len", help="Context per sequence to plan for (default: the largest that fits)."
    ),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Concurrent sequences to plan for."),
    gpu_memory_utilization: float | None = typer.Option(
        None,
        "--gpu-memory-utilization",
        help="Fraction of device memory vLLM may use (default: the hardware's recommended value).",
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", help="Prefill budget (sliding-window layers hold it in flight)."
    ),
    prefix_caching: bool = typer.Option(
        False,
        "--enable-prefix-caching",
        help="The server runs with prefix caching (hybrid models keep 2 state pages per sequence).",
    ),
    num_speculative_tokens: int = typer.Option(
        0,
        "--num-speculative-tokens",
        help="Speculative decoding's draft tokens per step (hybrid models keep one more state page per sequence and recurrent layer for each).",
    ),
    drafter: str | None = typer.Option(
        None, "--drafter", help="Drafter checkpoint (folder or Hub repo): its weights and KV count too."
    ),
    runtime: str | None = runtime_option(),
    revision: str | None = typer.Option(
        None, "--revision", help="Hub repos: branch, tag or commit sha (default: main)."
    ),
    format: TextOrJson = typer.Option(TextOrJson.text, "--format", "-f", help="text or json.", case_sensitive=False),
    explain: bool = typer.Option(False, "--explain", help="Show the arithmetic."),
    fail_on: str = fail_on_option(
        "error",
        "Exit 1 when a finding (settings vLLM refuses, as check-serve judges them) is at or above this "
        "(warn = warning).",
    ),
) -> None:
    """Memory plan from headers and config: weights, KV cache per token, state per sequence, the KV budget, and the
    largest context and sequence count that fit. Settings vLLM refuses at start-up (a -tp that does not divide the
    heads, a --max-model-len above the context) are findings, as check-serve reports them. Exit 0 when it fits, 1
    when it does not or a finding is at or above --fail-on, 2 on bad usage."""
    from ..knowledge.runtimes import runtime as load_runtime
    from ..memory_plan import Settings, memory_plan
    from ..plan.render import notes_text, text

    hardware = one_hardware(hardware_given, "plan")
    if hardware is None:
        hardware = load_runtime(runtime).serve.default_hardware
        if not hardware:
            raise UsageError(
                "--hardware is required (gb10, h100, h200, b200, rtx5090): the runtime profile "
                "names no hardware of its own"
            )
    settings = Settings(
        hardware=hardware,
        tensor_parallel_size=tensor_parallel_size,
        kv_cache_dtype=kv_cache_dtype,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        prefix_caching=prefix_caching,
        num_speculative_tokens=num_speculative_tokens,
        runtime=runtime,
    )
    plan = memory_plan(target, settings, drafter=drafter, revision=revision)
    if format == TextOrJson.json:
        emit(orjson.dumps(plan.to_json(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        emit(text(plan, explain=explain, notes=False))
        note(notes_text(plan))  # how the numbers were estimated: for people, on stderr
    raise typer.Exit(plan.exit_code(fail_on))
