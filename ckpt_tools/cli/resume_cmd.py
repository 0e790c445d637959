from __future__ import annotations

import orjson
import typer

from ..errors import UsageError
from .app import TextOrJson, app, emit
from .options import target_argument
from .repair_cmd import resume_hint


@app.command("repair", short_help="Resume or roll back an interrupted repair.")
def repair_command(
    target: str = target_argument("Local checkpoint folder (or a .safetensors file in it)."),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="Complete the interrupted repair: every file gets the repaired bytes its journal records.",
    ),
    rollback: bool = typer.Option(
        False,
        "--rollback",
        help="Undo the interrupted repair: write back the old bytes "
        "its journal records (refused when a shard was already "
        "rebuilt).",
    ),
    format: TextOrJson = typer.Option(TextOrJson.text, "--format", "-f", help="text or json.", case_sensitive=False),
) -> None:
    """Complete (--resume) or roll back (--rollback) a repair that was interrupted (finding CK109), and remove the
    temporary files a killed repair left. Reading a checkpoint never does this: only this command and the repairs
    write."""
    from ..repair.resume import resume as resume_repair

    if resume == rollback:
        raise UsageError("give exactly one of --resume and --rollback")
    with resume_hint(target):
        result = resume_repair(target, rollback=rollback)
    emit(
        orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"
        if format == TextOrJson.json
        else result.render()
    )
