from __future__ import annotations

import orjson
import typer

from .app import TextOrJson, app, emit, keep_until_exit
from .options import hardware_ids, hardware_option, runtime_option, target_argument


@app.command("inspect", short_help="Census: dtypes, per-layer schemes, kernels, tensor lists.")
def inspect_command(
    target: str = target_argument(),
    tensors: str | None = typer.Option(None, "--tensors", "-t", help="List tensors whose name matches this glob."),
    format: TextOrJson = typer.Option(TextOrJson.text, "--format", "-f", help="text or json.", case_sensitive=False),
    runtime: str | None = runtime_option(),
    hardware: list[str] | None = hardware_option("The kernel column for these (default: the runtime's)."),
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
        hardware=list(hardware_ids(hardware)),
    )
    keep_until_exit(result)
    if format == TextOrJson.json:
        emit(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        emit(result.render_text())
