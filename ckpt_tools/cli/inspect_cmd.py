from __future__ import annotations

import orjson
import typer

from .app import TextOrJson, app, emit, keep_until_exit


@app.command("inspect")
def inspect_command(
    target: str = typer.Argument(
        ..., help="Checkpoint folder, .safetensors file, or Hub repo (org/name, org/name@revision, hf://org/name)."
    ),
    tensors: str | None = typer.Option(None, "--tensors", "-t", help="List tensors whose name matches this glob."),
    format: TextOrJson = typer.Option(TextOrJson.text, "--format", "-f", help="text or json.", case_sensitive=False),
    runtime: str | None = typer.Option(None, "--runtime", help="Runtime profile (default {default_runtime})."),
    hardware: str | None = typer.Option(
        None, "--hardware", help="Hardware profile(s) for the kernel column, comma-separated (default: the runtime's)."
    ),
    revision: str | None = typer.Option(
        None, "--revision", help="Hub repos: branch, tag or commit sha (default: main)."
    ),
) -> None:
    """Census of a checkpoint: dtypes per component, the per-layer scheme table, and tensor listings."""
    from ..census import inspection
    from ..pipeline import analyze

    # A census of one shard is a fair question; its verdict lines describe that shard only.
    result = inspection(
        analyze(target, runtime=runtime, headers_only=True, revision=revision, lone_shard=True),
        tensors,
        hardware=[h for h in (hardware or "").split(",") if h.strip()],
    )
    keep_until_exit(result)
    if format == TextOrJson.json:
        emit(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        emit(result.render_text())
