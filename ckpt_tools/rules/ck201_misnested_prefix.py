from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ._experts import first_tensor, non_expert_modules
from ._memo import once_per
from .base import Context, Finding, Rule, files_of, register


@once_per
def rename_plan(ctx: Context) -> dict[tuple[str, str], list[str]]:
    """(old prefix, new prefix) -> tensors, for every tensor nested under a root its component does not belong to.

    Layouts come from rules/architectures.toml: a component marker (`visual`, `language_model`, ...) found directly
    below another component's root is mis-nested; it belongs at its own component's canonical root.
    """
    move = ctx.det.family.misnesting
    plan: dict[tuple[str, str], list[str]] = defaultdict(list)

    # The answer depends on the first four segments only: every expert below one experts prefix that long shares it,
    # so a healthy checkpoint shows itself with one answer per such prefix and one per other module.
    ckpt = ctx.ckpt
    if not any(
        move(first_tensor(group).rpartition(".")[0])
        if layer.count(".") >= 3
        else any(move(m.name) for projs in group.experts.values() for m in projs.values())
        for layer, group in ckpt.experts.items()
    ) and not any(map(move, non_expert_modules(ckpt))):
        return plan
    by_layer: dict[str, tuple[str, str] | None] = {}
    for name, module in ctx.ckpt.modules.items():
        where = module.expert
        if where is not None and where[0].count(".") >= 3:
            if where[0] not in by_layer:
                by_layer[where[0]] = move(name)
            key = by_layer[where[0]]
        else:
            key = move(name)
        if key is not None:
            plan[key].extend(t.name for t in module.tensors.values())
    return plan


@register
class MisnestedPrefix(Rule):
    """Tensors sit under a prefix the architecture does not load from.

    What it catches
    A component nested inside another component's namespace: the Qwen3.5/3.6 VL vision tower saved as
    `model.language_model.visual.*` instead of `model.visual.*`, or a doubled `model.language_model.language_model.*`
    (docs/reference/failures.md #4). Expected layouts per architecture family live in rules/architectures.toml.
    An error where vLLM does not load the names from there; a warning where vLLM's own mappers bring the prefix back
    where it belongs (Qwen3.5's text model strips a doubled `model.language_model.`; rules/loader.toml
    `inner_prefix_map`), so it serves, but other loaders read the names as stored.

    Why it matters
    vLLM maps checkpoint names through the architecture's `hf_to_vllm_mapper` (vllm/model_executor/models/qwen3_5.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §5.1)). A mis-nested
    tower maps to a module that does not exist: vLLM 0.33 fails with "There is no module or parameter named ...",
    and the Qwen3.5 loaders of earlier releases skipped it silently, so the tower ran uninitialised and image
    requests returned `!!!!` (the AEON-7 Qwen3.6-35B-A3B NVFP4 model card, "Vision fix").

    Anti-pattern
    Saving a VLM with a wrong `_checkpoint_conversion_mapping` / `base_model_prefix`, or merging adapters with a tool
    that re-roots every key under the language model.

    Fix
    Rename the prefix in the headers and the index; weight bytes stay identical: `ckpt fix-prefix TARGET` (applies
    this finding's plan) or `ckpt fix-prefix TARGET --from OLD --to NEW`.
    """

    code = "CK201"
    slug = "misnested-prefix"
    severity = "error"
    title = "Tensors under a prefix the architecture does not load"
    fixable = True

    def check(self, ctx: Context) -> Iterable[Finding]:
        plan = rename_plan(ctx)
        if not plan:
            return
        # The load model is imported when it is needed, not with the rule catalogue.
        from ..load.model import judged_by, maps_back

        # A prefix vLLM's own mappers bring back where it belongs loads there: the checkpoint is still laid out
        # against its architecture (transformers and other loaders read the names as stored), but it serves.
        served = {key: names for key, names in plan.items() if maps_back(ctx.ckpt, ctx.det, *key)}
        lost = {key: names for key, names in plan.items() if key not in served}
        if lost:
            yield self._finding(
                ctx, lost, "vLLM does not load them from there: the component is missing or fails to load."
            )
        if served:
            yield self._finding(
                ctx,
                served,
                f"{judged_by(ctx.det)}'s loader maps that prefix back, so it loads them where they belong; "
                "other loaders (transformers, other runtimes) read the names as stored.",
                severity="warning",
            )

    def _finding(
        self, ctx: Context, plan: dict[tuple[str, str], list[str]], why: str, severity: str | None = None
    ) -> Finding:
        existing = ctx.ckpt.tensors
        steps = []
        tensors: list[str] = []
        collisions: list[str] = []
        for (old, new), names in sorted(plan.items()):
            steps.append({"from": old, "to": new, "count": len(names)})
            tensors.extend(sorted(names))
            collisions.extend(n for n in names if new + n[len(old) :] in existing)
        desc = "; ".join(f"{s['count']} tensor(s) under `{s['from']}` belong under `{s['to']}`" for s in steps)
        message = f"{desc} ({ctx.det.family.name} layout). {why}"
        fix = ctx.command("fix-prefix")
        if collisions:
            message += f" {len(collisions)} renamed name(s) would collide with existing tensors; resolve by hand."
            fix = None
        files = files_of(ctx.ckpt, tensors)
        if ctx.ckpt.index is not None:
            files.add(ctx.ckpt.index.name)
        return self.finding(
            message,
            tensors=tensors,
            files=files,
            fix=fix,
            severity=severity,
            details={"rename": steps, "family": ctx.det.family.id, "collisions": collisions[:20]},
        )
