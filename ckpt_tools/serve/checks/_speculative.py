"""What CS150-CS153 (and the memory check) share: the command's --speculative-config as vLLM merges it, and the
method it names."""

from __future__ import annotations

import json
from typing import Any

from ...knowledge.runtimes import DFlash
from .base import ServeContext


def speculative_config(ctx: ServeContext) -> tuple[bool, Any]:
    """(whether the command sets --speculative-config with valid JSON, the merged value). Invalid JSON is the flag
    table's finding (invalid-flag-value), so the speculative checks do not judge it."""
    if ctx.cmd.last("--speculative-config") is None:
        return False, None
    try:
        return True, ctx.cmd.json_value("--speculative-config")
    except json.JSONDecodeError:
        return False, None


def speculative_dict(ctx: ServeContext) -> dict[str, Any] | None:
    """The speculative config when it is a JSON object (anything else is speculative-config-invalid)."""
    given, spec = speculative_config(ctx)
    return spec if given and isinstance(spec, dict) else None


def canonical_method(ctx: ServeContext, spec: dict[str, Any]) -> Any:
    """The config's method with the runtime's MTP aliases (qwen3_next_mtp, ...) folded into `mtp`."""
    method = spec.get("method")
    return "mtp" if method in ctx.rt.choices("mtp_model_types") else method


def dflash_config(ctx: ServeContext) -> tuple[dict[str, Any], DFlash] | None:
    """(speculative config, the runtime's DFlash rules) when the command runs a DFlash drafter on a runtime whose
    profile has DFlash rules (rules/runtimes/*.toml [speculative.dflash])."""
    spec = speculative_dict(ctx)
    if spec is None or canonical_method(ctx, spec) != "dflash" or ctx.rt.dflash is None:
        return None
    return spec, ctx.rt.dflash
