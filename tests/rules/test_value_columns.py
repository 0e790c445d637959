"""The value rules judge the statistics column by column (rules/_value_columns.py): C-level screens over every
measured tensor, per row class, with the exact per-tensor test only for what a screen lets through. These tests hold
each rule's result to its per-tensor definition (written out below, as the rules computed it one tensor at a time)
on genuine checkpoints whose statistics are edited in memory so that members of one class differ: one expert's
global scale off, a NaN among many equal block scales, a zero row in one of many equal grids, unread and
malformed statistics."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any

import pytest

from ckpt_tools.knowledge.modules import fused_groups_for
from ckpt_tools.knowledge.scales import global_scale_conventions, global_scales
from ckpt_tools.model.checkpoint import Checkpoint
from ckpt_tools.model.modules import ROLES, join_name
from ckpt_tools.model.values import WIDE_FLOAT_DTYPES, TensorStats, ValueStats
from ckpt_tools.pipeline import analyze, value_rules, wanted_values
from ckpt_tools.read.local import LocalSource
from ckpt_tools.read.value_scan import scan_values
from ckpt_tools.rules import ck307_mixed_scale_convention as ck307
from ckpt_tools.rules import ck501_nan_fp8_scale as ck501
from ckpt_tools.rules import ck502_fused_scale_mismatch as ck502
from ckpt_tools.rules import ck503_invalid_scale_value as ck503
from ckpt_tools.rules import ck504_zero_scale_row as ck504
from ckpt_tools.rules._value_columns import unusual, usable_scalars
from ckpt_tools.rules._values import scalar
from ckpt_tools.rules.base import Context
from tests.corrupt import GENUINE

# ---- the per-tensor definitions ---------------------------------------------------------------------------------


def ref_misplaced(ctx: Context) -> list[tuple[str, str, float]]:
    conventions = global_scale_conventions()
    out = []
    for row in ctx.det.rows:
        if row.disk.kind != "nvfp4":
            continue
        for suffix in ctx.ckpt.modules[row.name].tensors:
            convention = conventions.get(suffix)
            if convention is None or ROLES.get(suffix) != "weight_global_scale":
                continue
            name = join_name(row.name, suffix)
            value = scalar(ctx.ckpt, name)
            if value is None or not math.isfinite(value) or value <= 0:
                continue
            if (convention == "direct" and value > 1) or (convention == "reciprocal" and value < 1):
                out.append((name, convention, value))
    return out


def ref_nan_counts(ckpt: Checkpoint) -> dict[str, int]:
    assert ckpt.values is not None
    out = {}
    for name, s in ckpt.values.items():
        t = ckpt.tensors.get(name)
        if s.nan and t is not None and ck501.NanFp8Scale.wants_values(t):
            out[name] = s.nan
    return out


def ref_problems(ctx: Context) -> dict[str, str]:
    assert ctx.ckpt.values is not None
    out = {}
    for name, s in ctx.ckpt.values.items():
        t = ctx.ckpt.tensors.get(name)
        if t is None or not ck503.InvalidScaleValue.wants_values(t) or not s.count:
            continue
        found = ck503._problem(name, s)
        if found:
            out[name] = found
    return dict(sorted(out.items()))


def ref_zero_rows(ctx: Context) -> dict[str, str]:
    assert ctx.ckpt.values is not None
    reported = ref_problems(ctx)
    out = {}
    for name, s in ctx.ckpt.values.items():
        t = ctx.ckpt.tensors.get(name)
        if t is None or not s.zero_rows or name in reported or not ck504.ZeroScaleRow.wants_values(t):
            continue
        out[name] = ck504._what(t, s)
    return dict(sorted(out.items()))


def ref_mismatches(ctx: Context, suffixes: tuple[str, ...]) -> list[dict[str, Any]]:
    group_of = {shard: g for g in fused_groups_for(ctx.det.family.id) for shard in g.shards}
    sets: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, row in ctx.det.row_by_name.items():
        parent, _, last = name.rpartition(".")
        group = group_of.get(last)
        if group is not None and row.disk.kind == "nvfp4":
            sets[(parent, group.fused)].append(name)
    measured = ctx.ckpt.values.tensors if ctx.ckpt.values is not None else {}
    found: list[dict[str, Any]] = []
    for (parent, fused), shards in sorted(sets.items()):
        if len(shards) < 2:
            continue
        shards = sorted(shards)
        for suffix in suffixes:
            vals = {}
            for s in shards:
                st = measured.get(f"{s}.{suffix}")
                v = st.scalar if st is not None and st.dtype in WIDE_FLOAT_DTYPES else None
                if v is None or not (math.isfinite(v) and v > 0):
                    break
                vals[s] = v
            else:
                ck502._compare(found, f"{parent}.{fused}", suffix, shards, vals)
    found.sort(key=lambda m: -m["ratio"])
    return found


# ---- statistics edited in memory --------------------------------------------------------------------------------

Edit = Callable[[TensorStats, random.Random], TensorStats | None]


def _one(s: TensorStats, v: float) -> TensorStats:
    finite = math.isfinite(v)
    return dataclasses.replace(
        s,
        values=(v,),
        nan=int(v != v),
        inf=int(math.isinf(v)),
        zero=int(v == 0),
        negative=int(finite and v < 0),
        min=v if finite else None,
        max=v if finite else None,
    )


# (which tensors, how many, edit); None drops the statistics (an unread tensor).
EDITS: dict[str, tuple[Callable[[str, TensorStats], bool], int, Edit]] = {
    "one-global-scale-off": (lambda n, s: s.scalar is not None, 1, lambda s, r: _one(s, s.scalar * 1.7)),
    "global-scales-off": (lambda n, s: s.scalar is not None, 6, lambda s, r: _one(s, s.scalar * r.choice((0.4, 2.5)))),
    "within-rounding": (lambda n, s: s.scalar is not None, 3, lambda s, r: _one(s, s.scalar * 1.0005)),
    "just-beyond-rounding": (lambda n, s: s.scalar is not None, 3, lambda s, r: _one(s, s.scalar * 1.002)),
    "reciprocal": (lambda n, s: s.scalar is not None and s.scalar > 0, 4, lambda s, r: _one(s, 1 / s.scalar)),
    "nan-global": (lambda n, s: s.scalar is not None, 3, lambda s, r: _one(s, math.nan)),
    "inf-global": (lambda n, s: s.scalar is not None, 2, lambda s, r: _one(s, math.inf)),
    "zero-global": (lambda n, s: s.scalar is not None, 2, lambda s, r: _one(s, 0.0)),
    "negative-global": (lambda n, s: s.scalar is not None, 2, lambda s, r: _one(s, -abs(s.scalar))),
    "two-values-global": (
        lambda n, s: s.scalar is not None,
        3,
        lambda s, r: dataclasses.replace(s, count=2, values=(s.scalar, s.scalar)),
    ),
    "other-dtype-global": (lambda n, s: s.scalar is not None, 3, lambda s, r: dataclasses.replace(s, dtype="F8_E4M3")),
    "unread": (lambda n, s: True, 7, lambda s, r: None),
    "nan-among-equal-blocks": (lambda n, s: s.count > 64, 1, lambda s, r: dataclasses.replace(s, nan=3)),
    "nans-in-blocks": (lambda n, s: s.count > 64, 5, lambda s, r: dataclasses.replace(s, nan=r.randint(1, 9))),
    "zero-row": (
        lambda n, s: s.count > 64 and s.channels > 4,
        3,
        lambda s, r: dataclasses.replace(s, zero=s.count // s.channels, zero_rows=1, first_zero_row=2),
    ),
    "zero-blocks": (lambda n, s: s.count > 64, 3, lambda s, r: dataclasses.replace(s, zero=5)),
    "negative-blocks": (lambda n, s: s.count > 64, 3, lambda s, r: dataclasses.replace(s, negative=2, min=-1.0)),
    "uncounted-nan-value": (
        lambda n, s: s.values is not None,
        2,
        lambda s, r: dataclasses.replace(s, values=(math.nan, *s.values[1:])),
    ),
    "values-overflow-their-sum": (
        lambda n, s: s.scalar is not None,
        3,
        lambda s, r: _one(s, 1.5e308),
    ),
}

FIXTURES = (
    "modelopt-qwen3moe-nvfp4",  # experts, ModelOpt names (weight_scale_2 / input_scale)
    "llmc-qwen3moe-nvfp4",  # experts, compressed-tensors names
    "llmc-qwen35moe-nvfp4",  # in_proj_qkv / in_proj_z observed separately: a genuine mismatch
    "modelopt-llama-nvfp4",  # q / k / v: three shards
    "transformers-qwen3moe-fp8-block",  # F32 weight_scale_inv block grids
    "autoround-llama-gptq",  # signed GPTQ scales
    "llmc-llama-mxfp4",  # E8M0 scales
)


def _variants(ckpt: Checkpoint) -> Iterator[tuple[str, Checkpoint]]:
    assert ckpt.values is not None
    base = dict(ckpt.values.items())
    for label, (which, count, edit) in EDITS.items():
        rnd = random.Random(label)
        pool = [n for n, s in base.items() if which(n, s)]
        if not pool:
            continue
        stats = dict(base)
        for name in rnd.sample(pool, min(count, len(pool))):
            new = edit(stats[name], rnd)
            if new is None:
                del stats[name]
            else:
                stats[name] = new
        yield label, dataclasses.replace(ckpt, values=ValueStats(MappingProxyType(stats)))


def _results(ctx: Context, reference: bool) -> dict[str, Any]:
    scales = global_scales()
    if reference:
        return {
            "CK307": ref_misplaced(ctx),
            "CK501": ref_nan_counts(ctx.ckpt),
            "CK502": [ref_mismatches(ctx, scales.weight), ref_mismatches(ctx, scales.input)],
            "CK503": ref_problems(ctx),
            "CK504": ref_zero_rows(ctx),
        }
    zero_rows = [f.details["zero_channels"] for f in ck504.ZeroScaleRow().check(ctx)]
    return {
        "CK307": ck307.misplaced(ctx),
        "CK501": ck501.nan_counts(ctx.ckpt),
        "CK502": [ck502._mismatches(ctx, scales.weight), ck502._mismatches(ctx, scales.input)],
        "CK503": ck503.problems(ctx),
        "CK504": zero_rows[0] if zero_rows else {},
    }


@pytest.mark.parametrize("fixture", FIXTURES)
def test_value_rules_match_their_per_tensor_definition(fixture: str) -> None:
    analysis = analyze(str(GENUINE / fixture))
    reported: set[str] = set()
    for label, ckpt in _variants(analysis.checkpoint):
        ctx = Context(ckpt=ckpt, det=analysis.detection, hardware=(), target=fixture)
        expected = _results(ctx, reference=True)
        assert _results(ctx, reference=False) == expected, label
        reported.update(code for code, found in expected.items() if found and found != [[], []])
    # The edits must make every rule report something on some fixture, or the comparison proves little.
    assert reported, fixture


def test_every_value_rule_reports_on_some_edited_fixture() -> None:
    reported: dict[str, set[str]] = defaultdict(set)
    for fixture in ("modelopt-qwen3moe-nvfp4", "transformers-qwen3moe-fp8-block", "llmc-qwen3moe-nvfp4"):
        analysis = analyze(str(GENUINE / fixture))
        for label, ckpt in _variants(analysis.checkpoint):
            ctx = Context(ckpt=ckpt, det=analysis.detection, hardware=(), target=fixture)
            for code, found in _results(ctx, reference=True).items():
                if found and found != [[], []]:
                    reported[code].add(label)
    assert set(reported) == {"CK307", "CK501", "CK502", "CK503", "CK504"}
    assert "one-global-scale-off" in reported["CK502"]  # one expert's gate/up pair among equal ones
    assert "nan-among-equal-blocks" in reported["CK501"]
    assert "zero-row" in reported["CK504"]


def test_unusual_names_every_tensor_with_a_special_value_and_nothing_clean() -> None:
    clean = TensorStats("F32", 1, min=0.5, max=0.5, values=(0.5,))
    stats = {
        "a.clean": clean,
        "b.nan": TensorStats("F8_E4M3", 128, nan=1),
        "c.zero_row": TensorStats("F8_E4M3", 128, zero_rows=1),
        "d.uncounted": TensorStats("F32", 2, values=(1.0, math.inf)),
        "e.huge": TensorStats("F32", 2, min=1e308, max=1.7e308, values=(1e308, 1.7e308)),  # sums to inf
        "f.clean": clean,
    }
    assert unusual(ValueStats(MappingProxyType(stats))) == ("b.nan", "c.zero_row", "d.uncounted")
    assert unusual(ValueStats(MappingProxyType({"a": clean, "b": clean}))) == ()


def test_usable_scalars_are_the_finite_positive_scalars_else_nan() -> None:
    def one(v: float, dtype: str = "F32") -> TensorStats:
        return TensorStats(dtype, 1, values=(v,))

    stats = ValueStats(
        MappingProxyType(
            {
                "ok": one(2.0),
                "zero": one(0.0),
                "neg": one(-1.0),
                "inf": one(math.inf),
                "nan": one(math.nan),
                "fp8": one(2.0, "F8_E4M3"),
                "two": TensorStats("F32", 2, values=(1.0, 1.0)),
                "big": TensorStats("F32", 4096),
            }
        )
    )
    got = usable_scalars(stats, ["ok", "zero", "neg", "inf", "nan", "fp8", "two", "big", "unread", "ok"])
    assert got[0] == got[-1] == 2.0 and all(math.isnan(v) for v in got[1:-1])
    assert usable_scalars(stats, ["ok", "ok"]) == [2.0, 2.0]  # the all-C path
    assert all(math.isnan(v) for v in usable_scalars(stats, ["x", "y"]))


def test_fused_blocks_group_layers_by_shard_count_and_keep_duplicate_parents() -> None:
    # Kinds q, k, v: layer "a" complete, "b" lacks v, "c" has q only; the top level holds `q_proj` and `.q_proj`.
    blocks = ck502._blocks("qkv_proj", [(["a", "b", "c"], [0, 1, 2]), (["a", "b"], [3, 4]), (["a"], [5])], frozenset())
    layers = {layer: sorted(col[i] for col in b.columns) for b in blocks for i, layer in enumerate(b.layers)}
    assert layers == {("a", "qkv_proj"): [0, 3, 5], ("b", "qkv_proj"): [1, 4]}
    twins = ck502._blocks("qkv_proj", [(["", ""], [0, 1]), ([""], [2])], frozenset())
    assert [(b.layers, sorted(c[0] for c in b.columns)) for b in twins] == [([("", "qkv_proj")], [0, 1, 2])]


@pytest.mark.parametrize(
    "fixture", ["modelopt-qwen3moe-nvfp4", "llmc-qwen3moe-nvfp4-sharded", "llmc-llama-mxfp4", "autoround-llama-gptq"]
)
def test_the_scan_picks_the_per_tensor_selection(fixture: str) -> None:
    """`scan_values(wanted=)` judges each (dtype, suffix, shape) once: it measures what asking `wanted` of every
    loaded tensor picks, in a shard of the given ones, in the same order, with the same statistics."""
    source = LocalSource(GENUINE / fixture)
    ckpt = analyze(str(GENUINE / fixture), headers_only=True).checkpoint
    wanted = wanted_values(value_rules(())[0])
    every = {s.name: s for s in ckpt.shards}
    for shards in (every, {n: s for n, s in every.items() if n != ckpt.shards[0].name}):  # and without one (invalid)
        expected = [t for t in ckpt.tensors.values() if t.shard in shards and wanted(t)]
        picked = scan_values(source, list(ckpt.tensors.values()), shards, wanted=wanted)
        reference = scan_values(source, expected, shards)
        assert list(picked.items()) == list(reference.items())
        assert sorted(picked) == sorted(t.name for t in expected)
        assert expected or len(shards) != len(every)


@pytest.mark.parametrize("fixture", ["modelopt-qwen3moe-nvfp4", "llmc-qwen3moe-nvfp4", "llmc-qwen35moe-nvfp4"])
def test_views_prepared_while_the_scan_runs_give_the_unprepared_verdict(
    fixture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Rule.prepare` makes CK307's and CK502's header views on the checkpoint without values (as while the scan
    runs); `check` on the scanned checkpoint, same detection, must then use them and judge exactly as a judgement
    that prepared nothing (a fresh detection object: no view remembered)."""
    from ckpt_tools.rules import _value_columns

    analysis = analyze(str(GENUINE / fixture))
    made = []
    real_init = _value_columns.MemberTable.__init__

    def counted(self, ctx):
        made.append(ctx.det)
        real_init(self, ctx)

    monkeypatch.setattr(_value_columns.MemberTable, "__init__", counted)
    for label, ckpt in _variants(analysis.checkpoint):
        det = dataclasses.replace(analysis.detection)  # a new judgement's detection
        headers_only = dataclasses.replace(ckpt, values=None)
        before = len(made)
        for rule in (ck307.MixedScaleConvention, ck502.FusedScaleMismatch):
            rule.prepare(Context(ckpt=headers_only, det=det, hardware=(), target=fixture))
        assert len(made) == before + 1, label  # one table, made while "the scan runs"
        prepared = _results(Context(ckpt=ckpt, det=det, hardware=(), target=fixture), reference=False)
        assert len(made) == before + 1, label  # the checks found it made
        fresh = _results(Context(ckpt=ckpt, det=dataclasses.replace(det), hardware=(), target=fixture), reference=False)
        assert prepared == fresh == _results(Context(ckpt=ckpt, det=det, hardware=(), target=fixture), True), label
