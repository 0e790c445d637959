from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..knowledge.modules import model_config
from ..model.modules import ROLES
from ._experts import LayerGap, implausible_expert_count, layer_gaps
from .base import Context, Finding, Rule, module_files, register


def _ignored_for(ctx: Context, gap: LayerGap) -> set[str]:
    """Keys whose absence does not matter: input scales of a layer vLLM runs weight-only (they are dropped)."""
    out = set()
    for key in gap.missing:
        proj, suffix = key.split(".", 1)
        if ROLES.get(suffix) != "input_scale":
            continue
        row = ctx.det.row_by_name.get(f"{gap.layer}.0.{proj}")
        if row is not None and row.declared.activation == "A16":
            out.add(key)
    return out


def _describe(gap: LayerGap, keys: list[str]) -> str:
    by_ids: dict[tuple[int, ...], list[str]] = {}
    for key in keys:
        by_ids.setdefault(gap.missing[key], []).append(key)
    parts = []
    for ids, names in sorted(by_ids.items()):
        shown = ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")
        parts.append(f"expert(s) {shown} lack {', '.join(sorted(names))}")
    return "; ".join(parts)


@register
class MoeExpertMissingScale(Rule):
    """Some experts of an MoE layer lack scale tensors the other experts of that layer have.

    What it catches
    Per MoE layer (`...mlp.experts.<id>.<proj>.<suffix>`), every tensor suffix that some experts carry and others do
    not: typically `input_scale` / `input_global_scale` and sometimes `weight_scale_2`, listed with the expert ids
    that lack them; and expert ids below the configured expert count (`num_experts`, `num_local_experts`,
    `n_routed_experts`) that have no tensor at all (docs/reference/failures.md #9). Input scales of layers the config
    declares weight-only are ignored (vLLM drops them). Layers where every expert lacks a scale are reported by
    nvfp4-weight-only (CK401) or scale-shape-mismatch (CK403) instead.

    Why it matters
    vLLM fuses all experts of a layer into one parameter per scale (`w13_input_scale [E, 2]`, `w2_weight_scale_2
    [E]`, vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.2)) and fills the slots of experts it finds. Slots nobody loads stay `torch.empty` or zero,
    and nothing checks (no "weights not initialized" check for quantized models, vllm/model_executor/models/qwen3_5.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §5.1)): 1/0 gives inf,
    and the output turns to NaN, pad tokens or empty text only for prompts routed to those experts. The checkpoint
    boots green and fails prompt by prompt. The report's `activation_mode` stays `W4A4` (what vLLM builds); its
    `disk_activation_mode` reads `mixed`.

    Anti-pattern
    Calibrating an MoE with a small dataset that never routes tokens to some experts: ModelOpt then omits their
    `input_scale` (NVIDIA/Model-Optimizer#1354, vllm-project/vllm#45212); or exporting a pruned model without
    updating `num_experts`. A configured expert count past any released model (`num_experts = 10**12`, a typo or a
    hostile config) is reported on its own, without listing the ids below it.

    Fix
    Re-calibrate so every expert sees tokens (llm-compressor `moe_calibrate_all_experts=True`, a larger or more
    diverse calibration set for ModelOpt), or re-export with the scales synchronised across experts. For pruned
    experts, make the config's expert count match the checkpoint.
    """

    code = "CK402"
    slug = "moe-expert-missing-scale"
    severity = "error"
    title = "Some MoE experts lack scales the others have"

    def check(self, ctx: Context) -> Iterable[Finding]:
        yield from self._implausible_count(ctx)
        yield from self._gaps(ctx)

    def _implausible_count(self, ctx: Context) -> Iterable[Finding]:
        found = implausible_expert_count(ctx.ckpt)
        if found is None:
            return
        key, value = found
        present = max(len(group.experts) for group in ctx.ckpt.experts.values())
        limit = model_config().count_limit
        yield self.finding(
            f"config.json `{key}` is {value:,} experts per MoE layer, past any released model (ckpt believes up to "
            f"{limit:,}), while the checkpoint holds at most {present:,} per layer: vLLM sizes every MoE layer's "
            f"fused weights from this number and fails to allocate them. Set `{key}` to the expert count the "
            f"checkpoint holds.",
            files=("config.json",),
            count=1,
            details={"config_key": key, "configured_experts": value, "experts_present": present, "limit": limit},
        )

    def _gaps(self, ctx: Context) -> Iterable[Finding]:
        lines: list[str] = []
        tensors: list[str] = []
        layers: list[dict[str, Any]] = []
        for gap in layer_gaps(ctx.ckpt):
            keys = [k for k in gap.missing if k not in _ignored_for(ctx, gap)]
            if not keys and not gap.absent:
                continue
            part = _describe(gap, keys) if keys else ""
            if gap.absent:
                ids = ", ".join(map(str, gap.absent[:8])) + (", ..." if len(gap.absent) > 8 else "")
                part = "; ".join(p for p in (part, f"expert(s) {ids} have no tensor at all") if p)
            lines.append(f"{gap.layer}: {part}")
            tensors.extend(n for n in gap.missing_names() if n.rsplit(".", 2)[-2] + "." + n.rsplit(".", 1)[-1] in keys)
            layers.append(
                {
                    "layer": gap.layer,
                    "experts_present": gap.experts,
                    "missing": {k: list(gap.missing[k]) for k in keys},
                    "absent_experts": list(gap.absent),
                }
            )
        if not layers:
            return
        shown = "; ".join(lines[:3]) + (f"; and {len(lines) - 3} more layer(s)" if len(lines) > 3 else "")
        files = module_files(
            ctx.ckpt,
            (m.name for layer in layers for e in ctx.ckpt.experts[layer["layer"]].experts.values() for m in e.values()),
        )
        absent_total = sum(len(layer["absent_experts"]) for layer in layers)
        yield self.finding(
            f"{len(layers)} MoE layer(s) have experts missing tensors the other experts carry ({shown}). vLLM leaves "
            f"those experts' scale slots uninitialised: prompts routed to them produce NaN or empty output. "
            f"Re-calibrate so every expert sees tokens.",
            tensors=tensors,
            files=files,
            count=len(tensors) + absent_total,
            details={"layers": layers},
        )
