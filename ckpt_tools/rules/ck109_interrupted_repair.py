from __future__ import annotations

from collections.abc import Iterable

from ..model.tensors import JOURNAL_NAME
from .base import Context, Finding, Rule, register


@register
class InterruptedRepair(Rule):
    """A ckpt repair was interrupted: its journal or temporary files are still in the folder.

    What it catches
    `.ckpt-repair.journal` in the checkpoint folder: a `ckpt fix-prefix` / `scrub-nan` / `drop-orphans` / `fix` run
    was killed (SIGKILL, power loss, a full disk) after it recorded every byte it would write and before it
    finished writing them (error). Also temporary copies (`.<file>.ckpt-tmp`) a killed repair left (warning), and
    anything that is not a regular file sitting at those names (warning: repairs refuse to run until it is gone).
    Reading the checkpoint never acts on them: `ckpt doctor` reports, `ckpt repair` writes.

    Why it matters
    Until the repair is completed or rolled back, some files may hold the repaired bytes and others the old ones:
    the index can name tensors under their new names while a shard still carries the old ones (a multi-file repair
    changes one file at a time). vLLM and transformers read whatever is on disk, so they may fail to load or load a
    mix. A torn in-place header write is covered by the journal alone. Leftover temporary copies can be as large as
    a shard, and an upload of the folder includes them.

    Anti-pattern
    Killing a repair (or running it on a filesystem that fills up), then serving or uploading the folder without
    looking; deleting the journal by hand, which throws away the only record of what was half-written.

    Fix
    `ckpt repair --resume ./model` completes the interrupted repair (every file then holds the repaired bytes) and
    removes leftover temporary files; `ckpt repair --rollback ./model` restores the state before the repair where
    the journal holds the old bytes. A damaged journal cannot be trusted in either direction: restore the checkpoint
    from a copy, then delete the journal.
    """

    code = "CK109"
    slug = "interrupted-repair"
    severity = "error"
    title = "Interrupted repair pending"

    def check(self, ctx: Context) -> Iterable[Finding]:
        pending = ctx.ckpt.pending_repair
        if pending is None:
            return
        resume = ctx.command("repair", "--resume")
        temps = list(pending.temps)
        if pending.journal and pending.problem is None:
            yield self.finding(
                f"an interrupted `{pending.job}` repair left its journal ({JOURNAL_NAME}): until it is completed or "
                f"rolled back, shards and index may disagree and other loaders may read a mix of old and repaired "
                f"files. Complete it with `ckpt repair --resume`, or restore the old state with "
                f"`ckpt repair --rollback`.",
                files=[JOURNAL_NAME, *temps],
                fix=resume,
                details={"job": pending.job, "temporaries": temps},
            )
        elif pending.journal:
            yield self.finding(
                f"{JOURNAL_NAME} {pending.problem}: what an interrupted repair changed cannot be told from it, so "
                f"neither completing nor rolling back is safe; restore the checkpoint from a copy, then delete "
                f"{JOURNAL_NAME}.",
                files=[JOURNAL_NAME],
                details={"problem": pending.problem},
            )
        elif temps:
            size = sum(ctx.ckpt.files.get(name, 0) for name in temps)
            yield self.finding(
                f"{len(temps)} temporary file(s) of a killed repair ({', '.join(temps[:3])}"
                f"{', ...' if len(temps) > 3 else ''}, {size:,} B): no loader reads them, but an upload of the "
                f"folder would include them; `ckpt repair --resume` removes them.",
                files=temps,
                severity="warning",
                fix=resume,
                details={"temporaries": temps, "bytes": size},
            )
        if pending.foreign:
            yield self.finding(
                f"{', '.join(pending.foreign)} sit(s) at a name ckpt repairs use for their temporary files; every "
                f"repair refuses to run until it is removed.",
                files=[name.split(" (", 1)[0] for name in pending.foreign],
                severity="warning",
                details={"foreign": list(pending.foreign)},
            )
