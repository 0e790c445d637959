from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ..detect.resolve import ModuleRow, RowClass
from ..knowledge.scales import ScaleScheme, scheme_for
from ..model.dimensions import config_features
from ..model.modules import Module
from ._classes import in_row_order, row_classes, split_by, templates_of
from ._gpt_oss_layout import is_gpt_oss_experts
from ._gpt_oss_layout import problems as gpt_oss_problems
from ._layout_findings import WHAT, layout_findings
from .base import Context, Finding, Rule, register

# Formats whose int packing follows GPTQ's layout ([in/p, out]) or AWQ's ([in, out/p]) (rules/formats.toml).
_LAYOUT_PRODUCERS = {"gptq": "gptq", "awq": "awq"}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _int_layout(ctx: Context) -> tuple[str, int, int] | None:
    """(layout, bits, group_size) of a GPTQ / AWQ / AutoRound-int checkpoint, None for other formats."""
    cfg = ctx.det.config.data or {}
    producer = ctx.det.producer
    if producer == "auto-round":
        if str(cfg.get("data_type", "int")) != "int":
            return None
        layout = "awq" if "awq" in str(cfg.get("packing_format", "")) else "gptq"
    elif producer in _LAYOUT_PRODUCERS:
        layout = _LAYOUT_PRODUCERS[producer]
    else:
        return None
    bits, group = cfg.get("bits", cfg.get("w_bit")), cfg.get("group_size", cfg.get("q_group_size"))
    if not isinstance(bits, int) or bits <= 0 or 32 % bits or not isinstance(group, int):
        return None
    return layout, bits, group


def _logical(module: Module, scheme: ScaleScheme, bits: int) -> tuple[int, int] | None:
    """(out, in) of the weight as its scheme stores it."""
    w = module.tensors.get(scheme.weight.suffix)
    if w is None or len(w.shape) != 2:
        return None
    rows, cols = w.shape
    pack = 32 // bits
    return {
        "gptq-qweight": (cols, rows * pack),
        "awq-qweight": (cols * pack, rows),
        "packed4": (rows, cols * 2),
        "logical4": (rows, cols),
        "full": (rows, cols),
    }.get(scheme.weight.shape)


def _stored(shape: str, want: tuple[int, int], bits: int) -> tuple[int, int]:
    """The stored shape of an [out, in] weight in this layout."""
    n, k = want
    pack = 32 // bits
    return {"gptq-qweight": (k // pack, n), "awq-qweight": (k, n // pack), "packed4": (n, k // 2)}.get(shape, (n, k))


def _transposed(actual: tuple[int, ...], shape: str, want: tuple[int, int], bits: int) -> bool:
    """The weight holds the projection transposed: the stored shape reversed (`[in/2, out]` for packed NVFP4), or
    the [in, out] transpose packed in this layout."""
    right, a = _stored(shape, want, bits), tuple(actual)
    return a != right and (a == right[::-1] or a == _stored(shape, (want[1], want[0]), bits))


def _expected(shape: str, n: int, k: int, bits: int, group: int) -> tuple[int, ...] | None:
    g = k if group == -1 else group
    pack = 32 // bits
    return {
        "gptq-qweight": (k // pack, n),
        "awq-qweight": (k, n // pack),
        "group-kn": (_ceil(k, g), n),
        "zeros-gptq": (_ceil(k, g), _ceil(n, pack)),
        "g_idx": (k,),
    }.get(shape)


def _problems(
    ctx: Context, row: ModuleRow, name: str, module: Module, layout: tuple[str, int, int] | None
) -> list[tuple[str, str, str]]:
    """(suffix, problem, detail) for one quantized module of the row's class, named `name`."""
    if is_gpt_oss_experts(module):
        return gpt_oss_problems(ctx.ckpt, module)
    kind = row.declared.kind if row.declared.quantized else row.disk.kind
    weight = module.weight
    if weight is None:
        return []
    producer = {"auto-round": "gptq" if layout and layout[0] == "gptq" else "awq"}.get(
        ctx.det.producer, ctx.det.producer
    )
    scheme = scheme_for(kind, module.suffixes, weight.dtype, producer)
    if scheme is None:
        return []
    bits = layout[1] if layout else (8 if kind == "int8" else 4)
    want = config_features(ctx.ckpt, name)
    # Only the transposed layout is judged against the config: some families widen a projection on purpose (Qwen3.5's
    # gated q_proj is 2 x heads x head_dim), so other differences are not evidence of a defect.
    if want is not None and want[0] != want[1] and _transposed(weight.shape, scheme.weight.shape, want, bits):
        detail = (
            f"`{scheme.weight.suffix}` {weight.dtype} {list(weight.shape)} is stored transposed: the config gives "
            f"this projection [out {want[0]}, in {want[1]}], so the packed weight should be "
            f"{list(_stored(scheme.weight.shape, want, bits))}"
        )
        return [(scheme.weight.suffix, "features", detail)]
    dims = _logical(module, scheme, bits)
    if layout is None or dims is None:
        return []
    _, bits, group = layout
    if want is not None and dims[1] != want[1]:
        detail = (
            f"`{scheme.weight.suffix}` {list(weight.shape)} unpacks to {dims[1]} input features at {bits} bits, the "
            f"config gives this projection {want[1]}: the declared `bits` does not match the packing"
        )
        return [(scheme.weight.suffix, "features", detail)]
    return _int_tensor_problems(ctx, module, scheme, dims, bits, group)


def _int_tensor_problems(
    ctx: Context, module: Module, scheme: ScaleScheme, dims: tuple[int, int], bits: int, group: int
) -> list[tuple[str, str, str]]:
    """The tensors beside a GPTQ / AWQ `qweight` of `dims` (out, in): present, of their dtypes and shapes, nothing
    of another layout; input features that split into words and groups."""
    n, k = dims
    out: list[tuple[str, str, str]] = []
    for spec in scheme.tensors:
        if spec.role == "weight":
            continue
        t = module.tensors.get(spec.suffix)
        if t is None:
            if spec.required:
                out.append((spec.suffix, "missing", f"no `{spec.suffix}`"))
            continue
        if t.dtype not in spec.dtypes:
            out.append((spec.suffix, "dtype", f"`{spec.suffix}` is {t.dtype}, expected {'/'.join(spec.dtypes)}"))
        exp = _expected(spec.shape, n, k, bits, group)
        if exp is not None and tuple(t.shape) != exp:
            detail = (
                f"`{spec.suffix}` has shape {list(t.shape)}, expected {list(exp)} for {bits}-bit group {group} "
                f"({n} out x {k} in)"
            )
            out.append((spec.suffix, "shape", detail))
    if k % (32 // bits) or (group not in (-1, 0) and k % group):
        detail = f"{k} input features do not split into {bits}-bit words and groups of {group}"
        out.append((scheme.weight.suffix, "features", detail))
    known = {t.suffix for t in scheme.tensors}
    stray = sorted(s for s in module.suffixes - known if s not in ("bias",))
    out.extend((s, "extra", f"`{s}` beside a {ctx.det.producer} `{scheme.weight.suffix}`") for s in stray)
    return out


def packed_layout_problems(ctx: Context) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(suffix, problem) -> [(module, detail)] over every quantized row, in row order. WHY per class and name
    template (`_classes`): `_problems` reads the module's layout, the row's schemes (the disk scheme is its layout's)
    and, of its name, only what `config_features` reads: the last segment and whether `.experts.`,
    `.shared_expert.`, `.self_attn.` or `.mlp.` occur. None of these holds a digit, so names that differ only in
    their digits get the same answer (a last segment with digits names no projection either way); a class is split
    by template only when its templates get different answers."""
    layout = _int_layout(ctx)
    modules = ctx.ckpt.modules
    found: list[tuple[list[str] | tuple[str, ...], list[tuple[str, str, str]]]] = []
    # Classes may be finer than what the answer reads (group, component, ignore entry): one answer per what it
    # reads, the schemes by identity (shared objects, alive with the rows).
    memo: dict[tuple[int, int, int, str], list[tuple[str, str, str]]] = {}

    def answer(c: RowClass, template: str, name: str) -> list[tuple[str, str, str]]:
        key = (c.layout, id(c.row.declared), id(c.row.disk), template)
        got = memo.get(key)
        if got is None:
            got = memo[key] = _problems(ctx, c.row, name, modules[c.row.name], layout)
        return got

    for c in row_classes(ctx):
        if not (c.row.disk.quantized or c.row.declared.quantized):
            continue
        templates, first = templates_of(c.names)
        answers = {t: answer(c, t, name) for t, name in first.items()}
        if len(answers) == 1 or all(a == answers[templates[0]] for a in answers.values()):
            if answers[templates[0]]:
                found.append((c.names, answers[templates[0]]))
            continue
        found.extend((names, answers[t]) for t, names in split_by(c.names, templates).items() if answers[t])
    grouped: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for name, problems in in_row_order(found):
        for suffix, problem, detail in problems:
            grouped[(suffix, problem)].append((name, detail))
    return grouped


@register
class PackedLayoutMismatch(Rule):
    """Packed quantized weights whose layout does not fit their format or the model's dimensions.

    What it catches
    - GPTQ (and AutoRound `auto_round:auto_gptq`): `qweight` I32 `[in / (32/bits), out]`, `scales`
      `[ceil(in/group), out]`, `qzeros` I32 `[ceil(in/group), out / (32/bits)]`, `g_idx` `[in]`; AWQ (and
      `auto_round:auto_awq`): `qweight` I32 `[in, out / (32/bits)]`, `qzeros` and `scales` `[in/group, ...]`. Missing
      required tensors, wrong dtypes, shapes that do not match the declared `bits` / `group_size`, tensors of another
      layout beside the `qweight` (a float `weight`), and input widths that do not split into words and groups;
    - any quantized weight (NVFP4, MXFP4, FP8, int) whose unpacked `[out, in]` is not what config.json gives the
      projection (`hidden_size`, `intermediate_size`, `moe_intermediate_size`, heads x `head_dim`), including a packed
      NVFP4 weight stored transposed as `[in/2, out]`: its byte size is right, so nothing else notices;
    - gpt-oss MXFP4 experts: `{gate_up,down}_proj_blocks` U8 `[experts, rows, cols/32, 16]` and `_scales` U8
      `[experts, rows, cols/32]` (gate_up: 2 x `intermediate_size` rows of `hidden_size`; down: `hidden_size` rows of
      `intermediate_size`), scales that do not match their blocks, and a missing half of the pair.

    Why it matters
    vLLM allocates `qweight` / `scales` / `qzeros` from the config's `bits` and `group_size` and the layer sizes
    (vLLM 0.33 auto_gptq.py, auto_awq.py, mxfp4.py `create_weights`) and copies the tensors in: a mismatch fails at load
    ("Attempted to load weight ... into parameter ...") or, where the element count agrees (a transposed packed
    weight), loads scrambled weights and serves garbage or fails in the FP4 GEMM's shape check.

    Anti-pattern
    Repacking GPTQ as AWQ (or back) by renaming tensors, editing `bits` / `group_size` after export, hand-written
    converters that transpose packed weights (some Gemma-4 NVFP4 uploads stored `[in/2, out]`).

    Fix
    Re-export the model with the producer (AutoRound, GPTQModel, AutoAWQ, ModelOpt, llm-compressor) and keep the
    config it wrote; never transpose or rename packed tensors by hand.
    """

    code = "CK404"
    slug = "packed-layout-mismatch"
    severity = "error"
    title = "Packed quantized weight layout does not fit its format or the model"

    def check(self, ctx: Context) -> Iterable[Finding]:
        if ctx.det.rejection:
            return
        what = {
            **WHAT,
            "extra": "carry a stray `{suffix}`",
            "features": "have weights whose dimensions do not match the model",
        }
        yield from layout_findings(
            self, ctx, packed_layout_problems(ctx), what, "vLLM fails to load them or loads scrambled weights."
        )
