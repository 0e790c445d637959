"""A repair's after-state takes the global-scale columns of the classes it shares with the before-state from the
before-state's (`rules._value_columns.MemberScalars`, its donor) when both read the very same value statistics. The
columns must be exactly the ones looked up afresh: held here on a rename that moves a class to the front (every
shared class sits at another position of the after-state's columns) and declined where the statistics differ."""

from __future__ import annotations

import dataclasses
import math

from ckpt_tools.detect.resolve import detect
from ckpt_tools.pipeline import analyze
from ckpt_tools.repair import fix_prefix
from ckpt_tools.repair.guard import resolve_local
from ckpt_tools.repair.predict import after_checkpoint, with_scanned_values
from ckpt_tools.repair.runner import _plan
from ckpt_tools.rules import _value_columns
from ckpt_tools.rules._value_columns import MemberScalars
from ckpt_tools.rules.base import Context
from tests.repair_helpers import copy_of


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


def _states(tmp_path, pairs, carried=True):
    folder = copy_of("modelopt-qwen3moe-nvfp4", tmp_path)
    analysis = analyze(str(folder))  # with the value scan
    assert analysis.checkpoint.values is not None
    plan, steps = _plan(analysis, fix_prefix.job(pairs), str(folder), resolve_local(str(folder)), writable=False)
    after = after_checkpoint(analysis.checkpoint, plan, steps, analysis.detection)
    det = detect(after)  # on the headers, as the repair judges its after-state while the scan runs
    kept = set(map(id, analysis.detection.classes))
    assert any(id(c) in kept for c in det.classes) is carried  # the detection was carried (the same class objects)
    after = with_scanned_values(after, analysis.checkpoint, plan)
    before_ctx = Context(ckpt=analysis.checkpoint, det=analysis.detection, hardware=(), target=str(folder))
    after_ctx = Context(ckpt=after, det=det, hardware=(), target=str(folder))
    return before_ctx, after_ctx


def _suffixes(table: MemberScalars) -> list[str]:
    return sorted(set().union(*table.table.suffixes))


def test_columns_taken_from_the_before_state_are_the_looked_up_ones(tmp_path):
    # The router (BF16, never measured) moves to the front: the statistics are shared, every class shifts.
    before_ctx, after_ctx = _states(tmp_path, [("model.layers.0.mlp.gate", "a.gate")])
    assert after_ctx.ckpt.values is before_ctx.ckpt.values
    before = MemberScalars(before_ctx)
    everything = range(len(before.classes))
    for suffix in _suffixes(before):
        before.column(suffix, everything)
    carried = MemberScalars(after_ctx)
    assert carried._donor is before
    _value_columns._last = None
    fresh = MemberScalars(after_ctx)
    assert fresh._donor is None
    shared = {id(c): k for k, c in enumerate(before.classes)}
    moved = [
        k
        for k, c in enumerate(carried.classes)
        if id(c) in shared and carried.starts[k] != before.starts[shared[id(c)]]
    ]
    assert moved  # the slices sit elsewhere: copied by class, not by position
    looked_up = 0
    for suffix in _suffixes(carried):
        column = carried.column(suffix, range(len(carried.classes)))
        assert _same(column, fresh.column(suffix, range(len(fresh.classes))))
        looked_up += sum(1 for v in column if not math.isnan(v))
    assert looked_up  # global scales were read (through the donor)


def test_a_partial_donor_leaves_the_rest_to_the_statistics(tmp_path):
    before_ctx, after_ctx = _states(tmp_path, [("model.layers.0.mlp.gate", "a.gate")])
    before = MemberScalars(before_ctx)
    suffix = next(s for s in _suffixes(before) if s.endswith("input_scale"))
    half = range(len(before.classes) // 2)
    before.column(suffix, half)  # the donor looked up only some classes
    carried = MemberScalars(after_ctx)
    assert carried._donor is before
    _value_columns._last = None
    fresh = MemberScalars(after_ctx)
    every = range(len(carried.classes))
    assert _same(carried.column(suffix, every), fresh.column(suffix, every))


def test_no_donor_over_other_statistics(tmp_path):
    # Quantized projections renamed: their statistics move to the new names, so the after-state's are a new object.
    before_ctx, after_ctx = _states(tmp_path, [("model.layers.1.self_attn", "model.layers.1.attn")], carried=False)
    assert after_ctx.ckpt.values is not before_ctx.ckpt.values
    before = MemberScalars(before_ctx)
    for suffix in _suffixes(before):
        before.column(suffix, range(len(before.classes)))
    carried = MemberScalars(after_ctx)
    assert carried._donor is None
    unscanned = dataclasses.replace(after_ctx, ckpt=dataclasses.replace(after_ctx.ckpt, values=None))
    assert MemberScalars(unscanned)._donor is None
