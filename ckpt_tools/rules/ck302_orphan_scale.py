from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..dtypes import FLOAT_HIGH_PRECISION
from ..model.checkpoint import Checkpoint
from ..model.modules import ROLES, Module, join_name
from .base import Context, Finding, Rule, files_of, register

# Roles of the tensors that only mean something beside a quantized weight. KV-cache scales are excluded: they sit on
# attention projections (or on `self_attn`) whatever the projections' own precision.
QUANT_ROLES = frozenset({"weight_scale", "weight_global_scale", "input_scale", "pre_quant_scale", "zero_point"})


def orphans_of(module: Module) -> list[str]:
    """Quantization scales of a module whose weight is high precision on disk, or that has no weight at all."""
    weight = module.weight
    if weight is not None and weight.dtype not in FLOAT_HIGH_PRECISION:
        return []
    return sorted(t.name for s, t in module.tensors.items() if ROLES.get(s) in QUANT_ROLES)


def _suspects(ckpt: Checkpoint) -> Iterator[Module]:
    """The modules that may hold orphans, in module order. Whether a module does (`orphans_of` is empty or not)
    depends on its tensors' suffixes and its weight's dtype only, i.e. on its layout: it is decided on one module
    per layout, and only the members of a layout that has orphans are looked at."""
    layouts = ckpt.layouts
    modules = ckpt.modules
    flagged = {lid for lid, names in enumerate(layouts.members) if orphans_of(modules[names[0]])}
    if not flagged:
        return
    of = layouts.of
    yield from (module for name, module in modules.items() if of[name] in flagged)


@register
class OrphanScale(Rule):
    """Scale tensors for a module the config declares unquantized, or with no weight beside them.

    What it catches
    `weight_scale`, `weight_scale_2` / `weight_global_scale`, `input_scale` / `input_global_scale`,
    `pre_quant_scale` and zero points on a module whose weight is stored in BF16/F16/F32 (the module is unquantized,
    so the config excludes it or should), or on a module prefix with no weight tensor at all
    (docs/reference/failures.md #7). KV-cache scales (`k_scale`, `v_scale`) are not orphans.

    Why it matters
    vLLM builds an unquantized layer with no scale parameter, then fails at load: "There is no module or parameter
    named 'lm_head.input_scale'", `KeyError: '...shared_head.head.weight_scale'`. Some loaders drop a few such
    suffixes silently (Qwen3-MoE skips stray `.weight_scale` / `.input_scale`, vllm/model_executor/models/qwen3_5.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §5.1)), which hides the
    defect until another runtime or release loads the checkpoint.

    Anti-pattern
    An exporter that writes calibration scales for every module it observed, including the ones the recipe
    excludes (`lm_head` in `exclude_modules`, MTP `shared_head.head`).

    Fix
    Remove the orphan entries from the shard headers and the index without rewriting weight bytes:
    `ckpt drop-orphans TARGET`.
    """

    code = "CK302"
    slug = "orphan-scale"
    severity = "error"
    title = "Scale tensors without a quantized weight"
    fixable = True

    def check(self, ctx: Context) -> Iterable[Finding]:
        orphans: list[str] = []
        modules: dict[str, str] = {}
        gone: frozenset[str] | None = None
        for module in _suspects(ctx.ckpt):
            if gone is None:
                gone = ctx.ckpt.unavailable_tensors  # a pass over the index: only once something is suspect
            if (
                module.weight is None
                and {join_name(module.name, "weight"), join_name(module.name, "weight_packed")} & gone
            ):
                continue  # the weight is in a missing or broken shard: that shard's finding
            found = orphans_of(module)
            if not found:
                continue
            orphans.extend(found)
            weight = module.weight
            row = ctx.det.row_by_name.get(module.name)
            if weight is None:
                modules[module.name] = "no weight"
            elif row is not None and row.covered_by:
                modules[module.name] = f"{weight.dtype} weight, excluded by `{row.covered_by}`"
            else:
                modules[module.name] = f"{weight.dtype} weight"
        if not orphans:
            return
        orphans.sort()
        shown = "; ".join(f"`{m}` ({why})" for m, why in sorted(modules.items())[:3])
        more = f" and {len(modules) - 3} more module(s)" if len(modules) > 3 else ""
        files = files_of(ctx.ckpt, orphans)
        if ctx.ckpt.index is not None:
            files.add(ctx.ckpt.index.name)
        yield self.finding(
            f"{len(orphans)} scale tensor(s) on {len(modules)} module(s) without a quantized weight: {shown}{more}. "
            f"vLLM builds these modules unquantized and fails with \"There is no module or parameter named ...\". "
            f"Drop them from the headers and the index.",
            tensors=orphans,
            files=files,
            fix=ctx.command("drop-orphans"),
            details={"orphans": orphans, "modules": modules},
        )
