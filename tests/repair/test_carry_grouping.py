"""A rename's after-state groups only the modules a renamed tensor leaves or joins and carries every other module, its
layout and the expert groups over from the before-state (`model.checkpoint.carry_grouping`). The result must be
exactly what `group_checkpoint` gives on the renamed tensors, orders included: held here on renames that split,
merge, empty and create modules, move a module's first tensor, change layouts and move or dissolve experts, and end
to end on genuine fixtures against `ckpt doctor` of the repaired files."""

from __future__ import annotations

import dataclasses

import pytest

from ckpt_tools.model import checkpoint as checkpoint_module
from ckpt_tools.model.checkpoint import Checkpoint, carry_grouping, carry_tensor_index
from ckpt_tools.model.tensors import Shard, TensorInfo
from ckpt_tools.pipeline import analyze, doctor
from ckpt_tools.repair import fix_prefix, predict, run
from tests.repair_helpers import add_tensors, copy_of


def grouping(ckpt: Checkpoint) -> tuple:
    """Everything `Checkpoint._grouped` holds, every order included (mapping equality alone ignores order)."""
    modules, layouts, experts = ckpt._grouped
    return (
        [(name, m.name, list(m.tensors.items())) for name, m in modules.items()],
        list(layouts.of.items()),
        layouts.layouts,
        layouts.members,
        [
            (layer, [(e, [(p, m.name, list(m.tensors.items())) for p, m in ps.items()]) for e, ps in g.experts.items()])
            for layer, g in experts.items()
        ],
    )


def regrouped(ckpt: Checkpoint) -> tuple:
    return grouping(dataclasses.replace(ckpt))  # a copy has no cached views: `group_checkpoint` runs afresh


E = "l0.mlp.experts"
SHARDS = [
    [
        ("m.a", "F32", (4,)),
        ("n.a", "F32", (4,)),
        ("m.b", "BF16", (2, 2)),
        (f"{E}.0.gate_proj.weight", "U8", (8, 4)),
        (f"{E}.0.gate_proj.weight_scale", "F8_E4M3", (8, 1)),
        (f"{E}.1.gate_proj.weight", "U8", (8, 4)),
        (f"{E}.1.gate_proj.weight_scale", "F8_E4M3", (8, 1)),
        (f"{E}.1.up_proj.weight", "U8", (8, 4)),
        ("odd.weight", "I32", (3,)),
    ],
    [
        ("l1.mlp.experts.0.gate_proj.weight", "U8", (8, 4)),
        ("l1.mlp.experts.0.gate_proj.weight_scale", "F8_E4M3", (8, 1)),
        ("q.weight", "BF16", (4, 4)),
        ("q.weight_scale", "F32", ()),
        ("x.bias", "BF16", (4,)),
        ("lone", "F32", ()),
    ],
]


def make(shards=SHARDS) -> Checkpoint:
    built = []
    for i, entries in enumerate(shards):
        tensors = tuple(TensorInfo(n, d, s, f"s{i}", 4 * k, 4 * k + 4) for k, (n, d, s) in enumerate(entries))
        built.append(Shard(f"s{i}", 8 + 4 * len(entries), 0, None, tensors, True))
    return Checkpoint(target="t", remote=False, files={}, shard_files=tuple(s.name for s in built), shards=tuple(built))


def renamed(ckpt: Checkpoint, renames: dict[str, str]) -> Checkpoint:
    """`ckpt` with tensors renamed in place, as `repair.predict` builds a fix-prefix after-state."""
    shards = tuple(
        dataclasses.replace(
            s, tensors=tuple(t._replace(name=renames[t.name]) if t.name in renames else t for t in s.tensors)
        )
        for s in ckpt.shards
    )
    return dataclasses.replace(ckpt, shards=shards)


CASES = {
    "nothing renamed": {},
    "a module split in two": {"q.weight_scale": "q2.weight_scale"},
    "a module joins another (its layout changes, a layout disappears)": {"x.bias": "q.bias"},
    "a module's first tensor leaves (the module now loads later)": {"m.a": "z.a"},
    "a module emptied into a later one across shards": {"n.a": "q.a"},
    "a new layout in the middle": {"odd.weight": "odd.weight_packed"},
    "an expert changes id": {f"{E}.1.gate_proj.weight": f"{E}.7.gate_proj.weight"},
    "experts leave their group": {
        "l1.mlp.experts.0.gate_proj.weight": "l1.mlp.moved.0.gate_proj.weight",
        "l1.mlp.experts.0.gate_proj.weight_scale": "l1.mlp.moved.0.gate_proj.weight_scale",
    },
    "a plain module becomes an expert": {"lone": f"{E}.9.up_proj.weight_scale"},
    "a top-level tensor gets a module": {"lone": "m.lone"},
    "a module's tensors become top-level": {"m.a": "a", "m.b": "b"},
    "a whole module moved": {"q.weight": "p.q.weight", "q.weight_scale": "p.q.weight_scale"},
    "whole modules moved in both shards": {"m.a": "v.m.a", "m.b": "v.m.b", "x.bias": "v.x.bias"},
    "a whole expert moved to another id": {
        f"{E}.0.gate_proj.weight": f"{E}.5.gate_proj.weight",
        f"{E}.0.gate_proj.weight_scale": f"{E}.5.gate_proj.weight_scale",
    },
    "two modules swap names": {"m.a": "n.a", "m.b": "n.b", "n.a": "m.a"},
    "two whole modules merged into a new one": {"m.a": "w.a", "m.b": "w.b", "n.a": "w.c"},
    "a whole module moved, a suffix changed": {"q.weight": "p.weight2", "q.weight_scale": "p.weight_scale"},
    "a whole module moved onto a module that moves away": {"m.a": "n.a", "m.b": "n.b", "n.a": "k.a"},
}
# The renames that move whole modules to new names, which `_moved_whole` carries without regrouping anything.
MOVED_WHOLE = {
    "nothing renamed",
    "a whole module moved",
    "whole modules moved in both shards",
    "a whole expert moved to another id",
    "experts leave their group",
}


@pytest.mark.parametrize(("case", "renames"), CASES.items(), ids=CASES.keys())
def test_carried_grouping_is_group_checkpoint(case, renames, monkeypatch):
    monkeypatch.setattr(checkpoint_module, "_CARRY_AT_MOST", 1.0)
    whole: list[bool] = []
    moved_whole = checkpoint_module._moved_whole

    def spy(*args):
        out = moved_whole(*args)
        whole.append(out is not None)
        return out

    monkeypatch.setattr(checkpoint_module, "_moved_whole", spy)
    before = make()
    assert before.modules  # the analysis grouped its modules
    after = renamed(before, renames)
    assert carry_grouping(before, after) is True
    assert grouping(after) == regrouped(after)
    assert whole == [case in MOVED_WHOLE]  # which way it was carried
    # The modules no rename touched are the before-state's objects (their cached views come along).
    untouched = {n.rpartition(".")[0] for n in before.tensors} - {
        n.rpartition(".")[0] for pair in renames.items() for n in pair
    }
    assert untouched and all(after.modules[m] is before.modules[m] for m in untouched)


def _first_tensor(ckpt: Checkpoint, **fields) -> Checkpoint:
    """`ckpt` with fields of its first tensor changed."""
    first, *rest = ckpt.shards
    tensors = (first.tensors[0]._replace(**fields), *first.tensors[1:])
    return dataclasses.replace(ckpt, shards=(dataclasses.replace(first, tensors=tensors), *rest))


def test_carry_declines_what_is_not_a_rename_in_place(monkeypatch):
    monkeypatch.setattr(checkpoint_module, "_CARRY_AT_MOST", 1.0)
    before = make()
    assert carry_grouping(before, renamed(before, {"m.a": "z.a"})) is False  # nothing grouped yet to carry
    assert before.modules  # now it is
    first, second = before.shards
    reordered = dataclasses.replace(before, shards=(first, dataclasses.replace(second, tensors=second.tensors[::-1])))
    duplicated = dataclasses.replace(before, shards=(first, dataclasses.replace(second, tensors=first.tensors[:1])))
    moved = _first_tensor(before, begin=8)
    retyped = _first_tensor(before, name="z.a", dtype="F16")
    for after in (reordered, duplicated, moved, retyped):
        assert carry_grouping(before, after) is False
        assert "_grouped" not in vars(after) and after.modules  # it groups its own
    monkeypatch.setattr(checkpoint_module, "_CARRY_AT_MOST", 0.25)
    most = {n: "w." + n for n in list(before.tensors)[:5]}  # 5 of 15 renamed: regrouping costs no more
    assert carry_grouping(before, renamed(before, most)) is False


@pytest.mark.parametrize("renames", CASES.values(), ids=CASES.keys())
def test_carried_tensor_map_is_the_computed_one(renames):
    # Renames in the first shard, the second or both: the map (order included) is the one the shards give.
    before = make()
    assert before.tensors
    after = renamed(before, renames)
    assert carry_tensor_index(before, after) is True
    fresh = dataclasses.replace(after)  # no cached views: the map is built from the shards
    assert list(after.tensors.items()) == list(fresh.tensors.items()) and not after.duplicate_tensors
    if not renames:
        assert list(after.tensors.items()) == list(before.tensors.items())


def test_carried_tensor_map_declines_what_is_not_a_rename_in_place():
    before = make()
    assert carry_tensor_index(before, renamed(before, {"m.a": "z.a"})) is False  # no map built yet to carry
    assert before.tensors
    first, second = before.shards
    dropped = dataclasses.replace(before, shards=(first, dataclasses.replace(second, tensors=second.tensors[1:])))
    reordered = dataclasses.replace(before, shards=(second, first))
    for after in (dropped, reordered):
        assert carry_tensor_index(before, after) is False and "_tensor_index" not in vars(after)
    # A rename onto a name another shard holds: a repeated name, which only the full build reports.
    clash = renamed(before, {"q.weight": "m.a"})
    assert carry_tensor_index(before, clash) is False and "_tensor_index" not in vars(clash)
    assert clash.duplicate_tensors == {"m.a": ("s0", "s1")}


def verdict(report) -> list:
    return [(f.code, f.severity, f.message, tuple(f.tensors)) for f in report.sorted_findings()]


@pytest.fixture
def carried(monkeypatch):
    """Records whether each predicted after-state carried its grouping over (small fixtures: no share limit)."""
    monkeypatch.setattr(checkpoint_module, "_CARRY_AT_MOST", 1.0)
    calls: list[bool] = []

    def spy(before, after):
        calls.append(carry_grouping(before, after))
        return calls[-1]

    monkeypatch.setattr(predict, "carry_grouping", spy)
    return calls


def _prediction_matches_doctor(folder, job, carried, **kw):
    dry = run(str(folder), job, dry_run=True, **kw)
    real = run(str(folder), job, **kw)
    fresh = doctor(str(folder))
    assert carried == [True, True]
    assert verdict(dry.predicted) == verdict(real.after) == verdict(fresh)
    assert dry.predicted.checkpoint == fresh.checkpoint
    return dry, fresh


def test_misnested_fix_carries_its_grouping(tmp_path, carried):
    dry, fresh = _prediction_matches_doctor(
        copy_of("defective/qwen35moe-nvfp4-misnested-vision", tmp_path), fix_prefix.job(), carried
    )
    assert "misnested-prefix" in {f.slug for f in dry.before.findings}
    assert "misnested-prefix" not in {f.slug for f in fresh.findings}


def test_experts_renamed_out_of_their_group(tmp_path, carried):
    folder = copy_of("modelopt-qwen3moe-nvfp4", tmp_path)
    before = doctor(str(folder))
    job = fix_prefix.job([("model.layers.1.mlp.experts", "model.layers.1.mlp.moved_experts")])
    _, fresh = _prediction_matches_doctor(folder, job, carried, force=True)
    assert verdict(fresh) != verdict(before)  # the verdict changes: the carried grouping had to follow


def test_an_expert_renamed_to_another_id(tmp_path, carried):
    folder = copy_of("modelopt-qwen3moe-nvfp4", tmp_path)
    job = fix_prefix.job([("model.layers.0.mlp.experts.3", "model.layers.0.mlp.experts.9")])
    _prediction_matches_doctor(folder, job, carried, force=True)


def test_a_tensor_renamed_into_a_module_changes_its_layout(tmp_path, carried):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    name = "model.layers.0.self_attn.q_proj"
    ckpt = analyze(str(folder), headers_only=True).checkpoint
    rows = ckpt.modules[name].weight.shape[0]  # the projection's output rows: its bias's length
    add_tensors(folder, [(f"stray.{name}.bias", "BF16", [rows], b"\x00\x00" * rows)], beside=f"{name}.weight")
    _prediction_matches_doctor(folder, fix_prefix.job([("stray", "")]), carried, force=True)
    after = analyze(str(folder), headers_only=True).checkpoint
    assert "bias" in after.modules[name].tensors
    assert after.layouts.layouts[after.layouts.of[name]] != ckpt.layouts.layouts[ckpt.layouts.of[name]]
