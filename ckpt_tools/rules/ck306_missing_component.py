from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..detect.resolve import tensor_components
from ..knowledge.architectures import is_explicit
from ..knowledge.layouts import ComponentExpectation, component_expectations
from .base import Context, Finding, Rule, register


def _declared(ctx: Context, entry: ComponentExpectation) -> tuple[str, Any] | None:
    """(config key, value) when the config declares the component."""
    for key in entry.config_keys:
        value = ctx.ckpt.config_value(key)
        if value is None or value is False or value == {} or value == []:
            continue
        if entry.min_value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, float)) or value < entry.min_value
        ):
            continue
        return key, value
    return None


def _prefixes(ctx: Context, entry: ComponentExpectation) -> list[str]:
    out = []
    for template in entry.expect_prefixes:
        try:
            out.append(template.format(**{k: ctx.ckpt.config_value(k) for k in ("num_hidden_layers",)}))
        except (KeyError, IndexError, ValueError):
            continue
    return out


def _present(ctx: Context, entry: ComponentExpectation) -> bool:
    names = ctx.ckpt.tensors
    prefixes = tuple(_prefixes(ctx, entry)) if entry.expect_prefixes else ()
    if prefixes and any(n.startswith(prefixes) for n in names):
        return True
    if entry.expect_component and entry.expect_component in tensor_components(ctx.ckpt, ctx.det.family):
        return True
    return bool(entry.expect_pattern is not None and any(entry.expect_pattern.search(n) for n in names))


@register
class MissingComponent(Rule):
    """A component the config declares has no tensors in the checkpoint (MTP layers, vision tower, biases).

    What it catches
    The declarations in rules/layouts.toml checked against the tensors present (docs/reference/failures.md #16):
    - `mtp_num_hidden_layers` / `num_nextn_predict_layers` / `num_mtp_layers` >= 1 but no MTP tensors (`mtp.*`,
      `model.mtp*`, or the extra `model.layers.<num_hidden_layers>.*` block) (warning);
    - `vision_config` present for an architecture with a vision tower, but no vision tensors (error);
    - `attention_bias: true` but no q/k/v projection biases (error).

    Why it matters
    vLLM builds what the config declares and, for quantized models, does not report parameters that were never
    loaded (vllm/model_executor/models/qwen3_5.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §5.1)): a missing vision tower or bias runs on uninitialised memory, and a missing MTP head
    makes `--speculative-config '{"method": "mtp"}'` fail to start or silently run without a drafter.

    Anti-pattern
    Exporting from a Hub ID with a tool that only writes the modules it instantiated (ModelOpt dropped 0 of 15
    MTP tensors: NVIDIA/Model-Optimizer#2427), or saving only the language model of a VLM while keeping its config.

    Fix
    Re-export including the declared component (copy the BF16 MTP / vision tensors from the base checkpoint into the
    shards and the index), or remove the declaration from the config if the component is meant to be absent.
    """

    code = "CK306"
    slug = "missing-component"
    severity = "error"
    title = "Declared component has no tensors"

    def check(self, ctx: Context) -> Iterable[Finding]:
        family = ctx.det.family
        explicit = is_explicit(family.id, ctx.ckpt.architecture, ctx.ckpt.model_type)
        for entry in component_expectations():
            declared = _declared(ctx, entry)
            if declared is None:
                continue
            if entry.known_family_only and not (explicit and any(r.component == entry.component for r in family.roots)):
                continue
            if _present(ctx, entry):
                continue
            key, value = declared
            # JSON spelling (`true`, not Python's `True`): the user compares it with config.json.
            shown = json.dumps(value) if not isinstance(value, dict) else "{...}"
            where = (
                ", ".join(f"`{p}*`" for p in _prefixes(ctx, entry))
                if entry.expect_prefixes
                else f"the {entry.expect_component} component"
                if entry.expect_component
                else f"`{entry.expect_pattern.pattern if entry.expect_pattern else ''}`"
            )
            yield self.finding(
                f"config.json declares {entry.id} (`{key}` = {shown}) but no tensor matches {where}: "
                f"{entry.consequence}. Re-export with the component, or drop the declaration.",
                files=["config.json"],
                count=1,
                severity=entry.severity,
                details={"component": entry.id, "config_key": key, "source": entry.source},
            )
