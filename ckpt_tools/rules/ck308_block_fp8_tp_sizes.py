from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

from ..detect.resolve import ModuleRow
from ..knowledge.modules import fused_groups_for, parallel
from ..knowledge.scales import schemes
from .base import Context, Finding, Rule, register


@dataclass(frozen=True)
class Layer:
    """One linear vLLM builds: a fused group (q/k/v, gate/up) or a single module, with its shards' output sizes."""

    name: str
    style: str  # column / row / experts
    out_sizes: tuple[int, ...]
    in_features: int
    is_qkv: bool = False


def _pair(value: object) -> tuple[int, int] | None:
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return value[0], value[1]
    return None


def _block_size(ctx: Context, rows: list[ModuleRow]) -> tuple[int, int] | None:
    groups = (ctx.det.config.data or {}).get("config_groups")
    if isinstance(groups, dict):
        for row in rows:
            g = groups.get(row.group) if row.group else None
            weights = g.get("weights") if isinstance(g, dict) else None
            block = _pair(weights.get("block_structure")) if isinstance(weights, dict) else None
            if block:
                return block
    block = _pair(ctx.det.config.get("weight_block_size"))
    if block:
        return block
    if ctx.det.producer == "modelopt":
        for s in schemes():
            if s.producer == "modelopt" and s.kind == "fp8" and s.block_size:
                return s.block_size
    return None


def _block_fp8(row: ModuleRow) -> bool:
    return row.disk.kind == "fp8" and "block" in (row.disk.detail, row.declared.detail)


def block_rows(ctx: Context) -> list[ModuleRow]:
    """The block-FP8 rows, in row order. Asked per row class: the test reads a row's schemes, which its class
    fixes."""
    classes = [c for c in ctx.det.classes if _block_fp8(c.row)]
    return sorted(chain.from_iterable(c.rows() for c in classes), key=attrgetter("name"))


def layers(ctx: Context, rows: list[ModuleRow]) -> list[Layer]:
    """The linears vLLM builds from these rows: single column / row modules, fused groups, one per experts prefix."""
    par = parallel()
    group_of = {shard: g for g in fused_groups_for(ctx.det.family.id) for shard in g.shards}
    out: list[Layer] = []
    fused: dict[str, list[tuple[int, tuple[int, ...]]]] = defaultdict(list)  # position in the group, shape
    experts: dict[str, dict[str, int]] = defaultdict(dict)
    for row in rows:
        module = ctx.ckpt.modules[row.name]
        if module.weight is None:
            continue
        n, k = module.weight.shape
        parent, _, last = row.name.rpartition(".")
        if module.expert is not None:
            prefix, _, proj = module.expert
            experts[prefix][proj] = n if proj in par.column else k
        elif last in group_of:
            group = group_of[last]
            fused[f"{parent}.{group.fused}"].append((group.shards.index(last), module.weight.shape))
        elif last in par.row:
            out.append(Layer(row.name, "row", (n,), k))
        elif last in par.column:
            out.append(Layer(row.name, "column", (n,), k))
    out += [_fused_layer(name, members) for name, members in fused.items()]
    out += [layer for prefix, sizes in experts.items() if (layer := _experts_layer(prefix, sizes)) is not None]
    return out


def _fused_layer(name: str, members: list[tuple[int, tuple[int, ...]]]) -> Layer:
    """A merged column-parallel linear (q/k/v, gate/up): its shards' output sizes in the fused order."""
    shapes = [shape for _, shape in sorted(members, key=lambda m: m[0])]
    return Layer(name, "column", tuple(s[0] for s in shapes), shapes[0][1], name.endswith("qkv_proj"))


def _experts_layer(prefix: str, sizes: dict[str, int]) -> Layer | None:
    """The fused MoE of one experts prefix, sized by its intermediate size (any projection tells it)."""
    inter = next((sizes[p] for p in ("gate_proj", "up_proj", "w1", "w3", "down_proj", "w2") if p in sizes), None)
    return Layer(prefix, "experts", (inter,), inter) if inter else None


def _heads_ok(ctx: Context, tp: int) -> str | None:
    heads = ctx.ckpt.config_value("num_attention_heads")
    kv = ctx.ckpt.config_value("num_key_value_heads") or heads
    if isinstance(heads, int) and heads % tp:
        return f"{heads} attention heads are not divisible by {tp}"
    if isinstance(kv, int) and kv and (kv % tp if kv >= tp else tp % kv):
        return f"{kv} KV heads do not split evenly over {tp} GPUs"
    return None


def _block_ok(ctx: Context, layer: Layer, tp: int, bn: int, bk: int) -> str | None:
    """vLLM's validate_fp8_block_shape (linear.py / fp8_utils.py) and the block-FP8 MoE checks, for one TP size."""
    if layer.style == "experts":
        return _experts_ok(layer, tp, bn, bk)
    if layer.style == "row":
        return _row_ok(layer, tp, bk)
    return _column_ok(layer, tp, bn, ctx.ckpt.config_value("num_key_value_heads"))


def _experts_ok(layer: Layer, tp: int, bn: int, bk: int) -> str | None:
    inter = layer.out_sizes[0]
    if inter % tp:
        return f"{layer.name}: moe intermediate size {inter} is not divisible by {tp}"
    part = inter // tp
    if part % bn:
        return f"{layer.name}: gate/up output {part} per GPU is not divisible by block_n {bn}"
    if tp > 1 and part % bk:
        return f"{layer.name}: down input {part} per GPU is not divisible by block_k {bk}"
    return None


def _row_ok(layer: Layer, tp: int, bk: int) -> str | None:
    k = layer.in_features
    if k % tp:
        return f"{layer.name}: input size {k} is not divisible by {tp}"
    if tp > 1 and (k // tp) % bk:
        return f"{layer.name}: input_size_per_partition {k // tp} is not divisible by block_k {bk}"
    return None


def _column_ok(layer: Layer, tp: int, bn: int, kv: object) -> str | None:
    parts = []
    for i, size in enumerate(layer.out_sizes):
        if layer.is_qkv and i > 0 and isinstance(kv, int) and kv and tp > kv:
            parts.append(size // kv)  # KV heads replicate: one head per GPU
        elif size % tp:
            return f"{layer.name}: output size {size} is not divisible by {tp}"
        else:
            parts.append(size // tp)
    checked = parts if tp > 1 else parts[:-1]  # merged layers may end on a partial block at TP 1
    for part in checked:
        if part % bn:
            return f"{layer.name}: output_partition_size {part} is not divisible by block_n {bn}"
    return None


@dataclass(frozen=True)
class TpVerdicts:
    """Per tensor-parallel candidate: valid, ruled out by the attention heads, or ruled out by a block (why)."""

    valid: tuple[int, ...]
    by_heads: tuple[int, ...]
    blocked: dict[int, str]


def tp_verdicts(ctx: Context, built: list[Layer], bn: int, bk: int) -> TpVerdicts:
    valid, by_heads, blocked = [], [], {}
    for tp in parallel().tp_candidates:
        if _heads_ok(ctx, tp) is not None:
            by_heads.append(tp)
            continue
        reason = next((r for layer in built if (r := _block_ok(ctx, layer, tp, bn, bk))), None)
        if reason is None:
            valid.append(tp)
        else:
            blocked[tp] = reason
    return TpVerdicts(tuple(valid), tuple(by_heads), blocked)


def ruled_out(ctx: Context, tp: int, *, expert_parallel: bool = False) -> tuple[str, TpVerdicts] | None:
    """Why the block-FP8 shapes rule out `--tensor-parallel-size tp` (vLLM refuses to start there), with every
    candidate's verdict; None when they allow it, or the checkpoint has no block-FP8 layer. With `expert_parallel`
    (--enable-expert-parallel) the MoE layers are not split by TP. A size the heads rule out is not judged here
    (tensor-parallel-indivisible)."""
    rows = block_rows(ctx)
    block = _block_size(ctx, rows) if rows else None
    if block is None or _heads_ok(ctx, tp) is not None:
        return None
    bn, bk = block
    built = [layer for layer in layers(ctx, rows) if not (expert_parallel and layer.style == "experts")]
    reason = next((r for layer in built if (r := _block_ok(ctx, layer, tp, bn, bk))), None)
    if reason is None:
        return None
    return f"{reason} ({bn}x{bk} blocks)", tp_verdicts(ctx, built, bn, bk)


def _message(verdicts: TpVerdicts, bn: int, bk: int, moe: bool) -> str:
    ruled = ", ".join(str(tp) for tp in verdicts.blocked)
    tp, why = next(iter(verdicts.blocked.items()))
    message = (
        f"Block-FP8 weights ({bn}x{bk} blocks) rule out --tensor-parallel-size {ruled} (e.g. TP {tp}: {why}); "
        f"vLLM refuses to start there."
    )
    if verdicts.valid:
        message += f" Valid sizes: {', '.join(map(str, verdicts.valid))}."
    else:
        message += " No tensor-parallel size works: re-export with a smaller block."
    if moe:
        message += " With --enable-expert-parallel the MoE layers are not split by TP."
    return message


@register
class BlockFp8TpSizes(Rule):
    """Block-FP8 weight shapes that rule out tensor-parallel sizes.

    What it catches
    Block-quantized FP8 checkpoints (`weight_block_size`, compressed-tensors `block_structure`, ModelOpt
    FP8_PB_WO) whose layer sizes, split over `--tensor-parallel-size` GPUs, are not multiples of the block: per TP
    candidate (rules/modules.toml), the checks of vLLM's `validate_fp8_block_shape` (column-parallel and merged
    q/k/v, gate/up outputs per GPU divisible by block_n; row-parallel inputs per GPU divisible by block_k) and of the
    block-FP8 MoE (`moe_intermediate_size / tp` divisible by block_n, and by block_k above TP 1), plus the attention
    head split. Reports the TP sizes that remain valid (docs/reference/failures.md #19).

    Why it matters
    vLLM refuses to start at a TP size the shapes do not allow (`ValueError: Weight input_size_per_partition = 64 is
    not divisible by weight quantization block_k = 128`), after loading configs on every GPU; the valid sizes are
    not documented anywhere.

    Anti-pattern
    Picking `--tensor-parallel-size 8` for a block-FP8 model whose `moe_intermediate_size / 8` is not a multiple of
    128; block-quantizing a model whose dimensions are not multiples of the block.

    Fix
    Serve with one of the valid sizes listed in the finding (a command, `ckpt serve-flags -tp N` or `ckpt plan -tp
    N` naming a ruled-out size is block-fp8-tp-size's error, CS174), use expert parallelism
    (`--enable-expert-parallel`) when only the MoE split fails, or re-export with a smaller block.
    """

    code = "CK308"
    slug = "block-fp8-tp-sizes"
    severity = "warning"
    title = "Block-FP8 shapes rule out tensor-parallel sizes"

    def check(self, ctx: Context) -> Iterable[Finding]:
        rows = block_rows(ctx)
        block = _block_size(ctx, rows) if rows else None
        if block is None:
            return
        bn, bk = block
        built = layers(ctx, rows)
        verdicts = tp_verdicts(ctx, built, bn, bk)
        if not verdicts.blocked:
            return
        yield self.finding(
            _message(verdicts, bn, bk, any(layer.style == "experts" for layer in built)),
            files=["config.json"],
            count=len(verdicts.blocked),
            severity="warning" if verdicts.valid else "error",
            details={
                "block_size": [bn, bk],
                "valid_tp_sizes": list(verdicts.valid),
                "ruled_out": {str(k): v for k, v in verdicts.blocked.items()},
                "ruled_out_by_heads": list(verdicts.by_heads),
            },
        )
