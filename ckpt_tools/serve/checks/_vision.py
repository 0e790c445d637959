"""What CS102, CS121 and CS122 share: the command's --limit-mm-per-prompt, read the way vLLM reads it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .base import ServeContext


@dataclass(frozen=True)
class MmLimits:
    given: bool  # the command sets --limit-mm-per-prompt with a value
    parsed: bool  # ... and it is valid JSON (invalid JSON is the flag table's finding)
    limits: Any  # the parsed value
    unknown: tuple[str, ...]  # modalities the runtime does not know ("(not an object)" for a non-object)
    modalities: tuple[str, ...]  # the modalities it knows

    @property
    def usable(self) -> bool:
        """Whether the vision checks can judge the command: no limits given, or valid ones."""
        return not self.given or (self.parsed and not self.unknown)

    @property
    def nonzero(self) -> bool:
        """Some modality is allowed at least one item per prompt."""
        return isinstance(self.limits, dict) and any(_count(v) for v in self.limits.values())


def mm_limits(ctx: ServeContext) -> MmLimits:
    f = ctx.cmd.last("--limit-mm-per-prompt")
    if f is None or f.value is None:
        return MmLimits(False, False, None, (), ())
    modalities = tuple(ctx.rt.flags["--limit-mm-per-prompt"].spec.modalities)
    try:
        limits = ctx.cmd.json_value("--limit-mm-per-prompt")
    except json.JSONDecodeError:
        return MmLimits(True, False, None, (), modalities)
    unknown = [k for k in limits if k not in modalities] if isinstance(limits, dict) else ["(not an object)"]
    return MmLimits(True, True, limits, tuple(unknown), modalities)


def _count(v: Any) -> int:
    if isinstance(v, dict):
        v = v.get("count", 0)
    return v if isinstance(v, int) else 0
