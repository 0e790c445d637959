from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..detect.resolve import ModuleRow
from ..knowledge.scales import ScaleScheme, TensorSpec, scheme_for
from ..model.modules import Module
from ..model.tensors import TensorInfo
from ._classes import in_row_order, row_classes
from ._experts import partially_missing
from ._layout_findings import WHAT, layout_findings
from ._load_model import accounting
from .base import Context, Finding, Rule, register


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _one(shape: tuple[int, ...]) -> bool:
    """The shape holds exactly one element."""
    return all(d == 1 for d in shape)


@dataclass(frozen=True)
class Problem:
    module: str
    suffix: str
    kind: str  # missing / dtype / shape / in-features
    detail: str


def _group_args(ctx: Context, row: ModuleRow) -> dict[str, Any]:
    """The compressed-tensors `weights` args of the config group that quantizes this module, if any."""
    groups = (ctx.det.config.data or {}).get("config_groups")
    if ctx.det.producer != "compressed-tensors" or not isinstance(groups, dict) or row.group not in groups:
        return {}
    weights = groups[row.group].get("weights") if isinstance(groups[row.group], dict) else None
    return weights if isinstance(weights, dict) else {}


def _block(ctx: Context, row: ModuleRow, scheme: ScaleScheme) -> tuple[int, int] | None:
    args = _group_args(ctx, row)
    for value in (args.get("block_structure"), ctx.det.config.get("weight_block_size")):
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
            return value[0], value[1]
    return scheme.block_size


def _strategy(row: ModuleRow) -> str | None:
    for scheme in (row.declared, row.disk):
        if scheme.kind == "fp8" and scheme.detail in ("tensor", "channel", "block"):
            return scheme.detail
    return None


def _in_features(weight: TensorInfo, spec: TensorSpec, bits: int) -> int | None:
    cols = weight.shape[1]
    return {"packed4": cols * 2, "logical4": cols, "full": cols, "int-packed": cols * 32 // bits}.get(spec.shape)


def _expected(
    ctx: Context, row: ModuleRow, scheme: ScaleScheme, spec: TensorSpec, n: int, k: int
) -> list[tuple[int, ...]] | None:
    """Acceptable shapes for a scale tensor (None: any shape with one element)."""
    if spec.shape == "scalar":
        return None
    if spec.shape == "pair":
        return [(2,)]
    if spec.shape == "group":
        args = _group_args(ctx, row)
        if args.get("strategy") == "channel":
            return [(n, 1)]
        group = args.get("group_size") or ctx.det.config.get("group_size") or scheme.group_size
        if not isinstance(group, int) or group <= 0:
            return []
        return [(n, _ceil(k, group))]
    if spec.shape == "strategy":
        strategy = _strategy(row)
        if strategy == "tensor":
            return None
        if strategy == "channel":
            return [(n, 1), (n,)]
        if strategy == "block":
            block = _block(ctx, row, scheme)
            if block is None:
                return []
            bn, bk = block
            return [(_ceil(n, bn), _ceil(k, bk)), (_ceil(n, bn), 1, _ceil(k, bk), 1)]
        return []
    return []


def _layout_problems(ctx: Context, row: ModuleRow, module: Module) -> list[tuple[str, str, str, bool]]:
    """(suffix, kind, detail, skippable) for one module layout; `skippable` marks a missing tensor that another
    rule may own (per-expert gaps, tensors of a missing shard). Depends on the module's layout, its schemes and its
    config group only (what a class shares)."""
    weight = module.weight
    if weight is None:
        return []
    kind = row.disk.kind if row.disk.quantized else row.declared.kind
    scheme = scheme_for(kind, module.suffixes, weight.dtype, ctx.det.producer)
    if scheme is None:
        return _unfit_weight(row, module, weight)
    bits = 8 if kind == "int8" else 4
    n, k = weight.shape[0], _in_features(weight, scheme.weight, bits)
    if k is None:
        return []
    out: list[tuple[str, str, str, bool]] = []
    group = scheme.group_size or 16
    if kind == "nvfp4" and k % group:
        out.append((scheme.weight.suffix, "in-features", f"{k} input features, not a multiple of {group}", False))
    for spec in scheme.tensors:
        if spec.role != "weight":
            out.extend(_spec_problems(ctx, row, module, scheme, spec, (n, k), kind))
    return out


def _unfit_weight(row: ModuleRow, module: Module, weight: TensorInfo) -> list[tuple[str, str, str, bool]]:
    """A declared-quantized module whose tensors fit no layout of any scheme."""
    if not (row.declared.quantized and row.disk.kind == "unknown"):
        return []
    others = sorted(x for x in module.tensors if x not in ("weight", "weight_packed"))
    detail = (
        f"{weight.dtype} weight {list(weight.shape)} with {others or 'no scales'} fits no {row.declared.label} "
        f"layout ({row.disk.detail})"
    )
    return [(weight.name.rsplit(".", 1)[-1], "dtype", detail, False)]


def _spec_problems(
    ctx: Context,
    row: ModuleRow,
    module: Module,
    scheme: ScaleScheme,
    spec: TensorSpec,
    dims: tuple[int, int],
    kind: str,
) -> list[tuple[str, str, str, bool]]:
    """The problems of one tensor of the scheme beside a weight of `dims` (out, in features)."""
    t = module.tensors.get(spec.suffix)
    if t is None:
        return [(spec.suffix, "missing", f"no `{spec.suffix}`", True)] if spec.required else []
    out: list[tuple[str, str, str, bool]] = []
    if t.dtype not in spec.dtypes:
        out.append((spec.suffix, "dtype", f"`{spec.suffix}` is {t.dtype}, expected {'/'.join(spec.dtypes)}", False))
    n, k = dims
    shapes = _expected(ctx, row, scheme, spec, n, k)
    if shapes is None:
        if t.numel != 1:
            out.append((spec.suffix, "shape", f"`{spec.suffix}` has shape {list(t.shape)}, expected one value", False))
    elif shapes and tuple(t.shape) not in shapes and not (t.numel == 1 and any(_one(x) for x in shapes)):
        # A one-element scale for a one-block grid loads: vLLM's MoE loader copies a 0-d tensor into its slot
        # without narrowing (routed_experts.py _load_w13 / _load_w2); transformers writes such expert scales 0-d.
        weight = module.weight
        assert weight is not None
        want = " or ".join(str(list(s)) for s in shapes)
        detail = (
            f"`{spec.suffix}` has shape {list(t.shape)}, expected {want} for a {weight.dtype} weight "
            f"{list(weight.shape)} ({n} x {k} {kind.upper()})"
        )
        out.append((spec.suffix, "shape", detail, False))
    return out


def _judged(row: ModuleRow) -> bool:
    return row.disk.quantized or (row.declared.quantized and row.disk.kind == "unknown")


def scale_shape_problems(ctx: Context) -> list[Problem]:
    """Every module's problems, in row order. WHY per class: `_layout_problems` reads the module's layout, the row's
    schemes (the disk scheme is its layout's) and its config group, never its name, so every row of a class
    (`_classes.row_classes`) has the same problems; only the names differ, and members are listed only for classes
    that have problems."""
    modules = ctx.ckpt.modules
    found: list[tuple[tuple[str, ...], list[tuple[str, str, str, bool]]]] = []
    # Classes may be finer than what the answer reads (component, ignore entry): one answer per what it reads, the
    # schemes by identity (shared objects, alive with the rows).
    answers: dict[tuple[int, int, int, str | None], list[tuple[str, str, str, bool]]] = {}
    for c in row_classes(ctx):
        row = c.row
        if _judged(row):
            key = (c.layout, id(row.declared), id(row.disk), row.group)
            problems = answers.get(key)
            if problems is None:
                problems = answers[key] = _layout_problems(ctx, row, modules[row.name])
            if problems:
                found.append((c.names, problems))
    if not found:
        return []
    skip = partially_missing(ctx.ckpt) | ctx.ckpt.unavailable_tensors
    # A weight whose dtype fits no layout is one the loader copies into a parameter of another kind: load-dtype-cast
    # (CK604) names that parameter and the cast, so the verdict is its.
    casts = {f.tensor for f in accounting(ctx).tensors if f.problem == "dtype-cast" and f.owner is None}
    out: list[Problem] = []
    for name, problems in in_row_order(found):
        out.extend(
            Problem(name, *p[:3])
            for p in problems
            if not (p[3] and f"{name}.{p[0]}" in skip) and f"{name}.{p[0]}" not in casts
        )
    return out


@register
class ScaleShapeMismatch(Rule):
    """A quantized tensor's shape or dtype does not fit its scheme.

    What it catches
    For every quantized linear and expert projection, the tensors beside the weight are checked against the
    producer's scale table (rules/scales.toml; vllm/model_executor/layers/quantization/compressed_tensors/schemes, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.3); vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.1)):
    - NVFP4: packed weight U8 `[out, in/2]` (or F4 `[out, in]`), block scale F8_E4M3 `[out, in/16]`, global and
      input scales one F32 value each; input features a multiple of 16;
    - FP8: weight F8_E4M3 `[out, in]`, weight scale per the declared strategy (one value, `[out, 1]`, or
      `[ceil(out/bn), ceil(in/bk)]` for `weight_block_size` / `block_structure`);
    - int4/int8 pack-quantized: group scales `[out, ceil(in/group_size)]`, `weight_shape` `[2]`;
    - required scales that are missing for a whole module (per-expert gaps are moe-expert-missing-scale, CK402;
      missing input scales are nvfp4-weight-only, CK401), and weights whose dtype fits no scheme the config declares.

    Why it matters
    vLLM allocates parameters from the config's shapes and copies tensors in: a mismatch fails the load
    (`Attempted to load weight (...) into parameter (...)`, "Unsupported model when in features size is not multiple
    of 16"), or, where loaders reshape or broadcast, dequantizes with the wrong scales (cosine 0.756 in
    NVIDIA/Model-Optimizer#2160). A missing scale stays uninitialised memory.

    Anti-pattern
    ModelOpt `--low_memory_mode` quantizing meta tensors (half-size `weight_scale`), hand-converting between
    producers, block FP8 exports whose config `weight_block_size` was edited, truncated exports.

    Fix
    Re-export the affected modules with the producer; make `weight_block_size` / `group_size` in the config match
    the scales that were written.
    """

    code = "CK403"
    slug = "scale-shape-mismatch"
    severity = "error"
    title = "Quantized tensor shape or dtype does not fit its scheme"

    def check(self, ctx: Context) -> Iterable[Finding]:
        if ctx.det.rejection:
            return
        grouped: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
        for p in scale_shape_problems(ctx):
            grouped[(p.suffix, p.kind)].append((p.module, p.detail))
        what = {**WHAT, "in-features": "have input features NVFP4 cannot group"}
        yield from layout_findings(
            self, ctx, grouped, what, "vLLM fails to load them or dequantizes with wrong scales."
        )
