"""A rename's after-state takes index-tensor-mismatch's proof that every loaded tensor is where the index says from the
before-state (`rules.ck103_index_tensor_mismatch.carry_where_indexed`) only when the rename provably keeps it true:
the tensors and their index keys renamed alike, no tensor moved to another shard, and the index step's map made from
the analysis's own index. Held here to the answer computed afresh, on renames that keep it and on renames, indexes
changed on disk and tensors that break it (where a wrong carry would hide a CK103 error), and end to end against
`ckpt doctor` of the repaired files."""

from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType

import pytest

from ckpt_tools.model.checkpoint import Checkpoint, carry_tensor_index
from ckpt_tools.model.tensors import Index, Shard, TensorInfo
from ckpt_tools.pipeline import doctor
from ckpt_tools.repair import fix_prefix, predict, run, runner
from ckpt_tools.rules import ck103_index_tensor_mismatch as ck103
from tests.repair_helpers import copy_of, make_sharded

INDEX = "model.safetensors.index.json"
SHARDS = ("a.safetensors", "b.safetensors")
NAMES = (("v.x.w", "v.y.w", "m.z.w"), ("m.q.w", "v.r.w", "m.s.w"))


def make() -> Checkpoint:
    shards = []
    for shard, names in zip(SHARDS, NAMES, strict=True):
        tensors = tuple(TensorInfo(n, "BF16", (2,), shard, 4 * i, 4 * i + 4) for i, n in enumerate(names))
        shards.append(Shard(shard, 8 + 2 + 4 * len(tensors), 2, None, tensors, True))
    weight_map = {t.name: s.name for s in shards for t in s.tensors}
    return Checkpoint(
        target="t",
        remote=False,
        files={s.name: s.size for s in shards},
        shard_files=SHARDS,
        shards=tuple(shards),
        index=Index(INDEX, MappingProxyType(dict(sorted(weight_map.items())))),
    )


def renamed(before: Checkpoint, renames: dict, index_renames: dict) -> Checkpoint:
    """`before` with shard tensors renamed by `renames` and index keys by `index_renames`, as `repair.predict` builds
    an after-state."""
    shards = tuple(
        dataclasses.replace(
            s,
            tensors=tuple(t._replace(name=renames[t.name]) if t.name in renames else t for t in s.tensors),
        )
        for s in before.shards
    )
    assert before.index is not None
    weight_map = {index_renames.get(k, k): f for k, f in before.index.weight_map.items()}
    index = Index(INDEX, MappingProxyType(weight_map))
    return dataclasses.replace(before, shards=shards, index=index)


def fresh(ckpt: Checkpoint) -> bool:
    """`where_indexed` computed on a copy with no cached views."""
    return ck103.where_indexed(dataclasses.replace(ckpt))


VISION = {"v.x.w": "visual.x.w", "v.y.w": "visual.y.w", "v.r.w": "visual.r.w"}


@pytest.mark.parametrize(
    "renames",
    [VISION, {"m.s.w": "a.s.w"}, {"v.x.w": "zz.x.w", "m.q.w": "aa.q.w"}],
    ids=["a component", "one tensor, sorting first", "both shards"],
)
def test_carried_answer_is_the_computed_one(renames):
    before = make()
    assert ck103.where_indexed(before) is True
    after = renamed(before, renames, renames)
    carry_tensor_index(before, after)
    assert ck103.carry_where_indexed(before, after, renames, renames, before.index) is True
    assert ck103.where_indexed(after) is True and fresh(after) is True


APART = {**VISION, "v.x.w": "elsewhere.x.w"}
BROKEN = {  # (tensor renames, index key renames): each leaves the index disagreeing with the shards
    "tensors renamed, index keys not": (VISION, {}),
    "index keys renamed, tensors not": ({}, VISION),
    "one tensor and its key renamed apart": (VISION, APART),
}


@pytest.mark.parametrize(("renames", "index_renames"), BROKEN.values(), ids=BROKEN.keys())
def test_carry_declines_a_rename_that_breaks_the_index(renames, index_renames):
    before = make()
    assert ck103.where_indexed(before) is True
    after = renamed(before, renames, index_renames)
    assert fresh(after) is False  # the index really disagrees: CK103 must judge it
    assert ck103.carry_where_indexed(before, after, renames, index_renames, before.index) is False
    assert ck103._WHERE_INDEXED not in vars(after)
    assert ck103.where_indexed(after) is False


def test_carry_declines_a_tensor_moved_to_another_shard():
    before = make()
    assert ck103.where_indexed(before) is True
    moves = {"v.x.w": "visual.x.w"}
    a, b = renamed(before, moves, moves).shards
    moved = (dataclasses.replace(a, tensors=a.tensors[1:]), dataclasses.replace(b, tensors=(*b.tensors, a.tensors[0])))
    after = dataclasses.replace(renamed(before, moves, moves), shards=moved)
    assert fresh(after) is False  # the index still maps it to a.safetensors
    assert ck103.carry_where_indexed(before, after, moves, moves, before.index) is False
    assert ck103.where_indexed(after) is False


def test_carry_needs_the_analysis_index_and_its_answer():
    before = make()
    after = renamed(before, VISION, VISION)
    assert ck103.carry_where_indexed(before, after, VISION, VISION, before.index) is False  # never computed before
    ck103.where_indexed(before)
    other = Index(INDEX, MappingProxyType(dict(before.index.weight_map)))  # equal, but not the analysis's index
    assert ck103.carry_where_indexed(before, after, VISION, VISION, None) is False  # the file changed on disk
    assert ck103.carry_where_indexed(before, after, VISION, VISION, other) is False
    assert ck103._WHERE_INDEXED not in vars(after)
    # An answer of False is never carried: the rule then lists what disagrees.
    misplaced = {**before.index.weight_map, "m.q.w": "a.safetensors"}
    wrong = dataclasses.replace(before, index=Index(INDEX, MappingProxyType(misplaced)))
    assert ck103.where_indexed(wrong) is False
    assert ck103.carry_where_indexed(wrong, renamed(wrong, VISION, VISION), VISION, VISION, wrong.index) is False


def verdict(report) -> list:
    return [(f.code, f.severity, f.message, tuple(f.tensors)) for f in report.sorted_findings()]


@pytest.fixture
def carries(monkeypatch):
    """Records whether each predicted after-state carried the answer over."""
    calls: list[bool] = []

    def spy(*args):
        calls.append(ck103.carry_where_indexed(*args))
        return calls[-1]

    monkeypatch.setattr(predict, "carry_where_indexed", spy)
    return calls


def _misnested(tmp_path):
    return make_sharded(copy_of("defective/qwen35moe-nvfp4-misnested-vision", tmp_path))


def test_misnested_fix_carries_the_answer(tmp_path, carries):
    folder = _misnested(tmp_path)
    dry = run(str(folder), fix_prefix.job(), dry_run=True)
    real = run(str(folder), fix_prefix.job())
    assert carries == [True, True]
    after = doctor(str(folder))
    assert verdict(dry.predicted) == verdict(real.after) == verdict(after)
    assert "index-tensor-mismatch" not in {f.slug for f in after.findings}


def test_an_index_changed_after_the_analysis_is_judged_afresh(tmp_path, carries, monkeypatch):
    """The index file is changed on disk between the analysis and the planning (one tensor mapped to the wrong shard):
    the step's map is the changed file's, so the after-state must find the mismatch a carried answer would hide."""
    folder = _misnested(tmp_path)
    analyze_once = runner.analyze

    def analyze_then_edit(*args, **kwargs):
        analysis = analyze_once(*args, **kwargs)
        index = json.loads((folder / INDEX).read_text())
        name = next(k for k in sorted(index["weight_map"]) if not k.startswith("model.language_model.visual."))
        shards = sorted(set(index["weight_map"].values()))
        index["weight_map"][name] = next(s for s in shards if s != index["weight_map"][name])
        (folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        return analysis

    monkeypatch.setattr(runner, "analyze", analyze_then_edit)
    dry = run(str(folder), fix_prefix.job(), dry_run=True, headers_only=True)
    assert carries == [False]
    assert "index-tensor-mismatch" not in {f.slug for f in dry.before.findings}
    assert "index-tensor-mismatch" in {f.slug for f in dry.predicted.findings}


def test_an_index_renamed_apart_from_its_tensors_is_judged_afresh(tmp_path, carries, monkeypatch):
    """A plan whose index renames do not follow its tensor renames for one key (built by hand here: fix-prefix derives
    both from the same prefixes): the after-state's index names a tensor no shard holds, which CK103 must report."""
    folder = _misnested(tmp_path)
    build = fix_prefix._plan

    def one_key_left(ckpt, renames, pairs, counts):
        plan = build(ckpt, renames, pairs, counts)
        kept = dict(plan.index_renames)
        kept.pop(next(iter(kept)))
        return dataclasses.replace(plan, index_renames=MappingProxyType(kept))

    monkeypatch.setattr(fix_prefix, "_plan", one_key_left)
    dry = run(str(folder), fix_prefix.job(), dry_run=True, headers_only=True)
    assert carries == [False]
    assert "index-tensor-mismatch" in {f.slug for f in dry.predicted.findings}
