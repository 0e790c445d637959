"""A repair's after-state carries the before-state's detection over for the modules no step changed, and judges only
the changed ones afresh (`detect.resolve.carry_detection` / `_carried`). The carried detection must be exactly what
detecting the after-state from scratch gives, every order included: held here on renames that change a module's
component, its ignore / exclude entry and its forced-unquantized pattern (where a carried row would be wrong), and on
renames the carry must decline (experts moved, a layout changed)."""

from __future__ import annotations

import dataclasses

import pytest

from ckpt_tools.detect import resolve
from ckpt_tools.detect.resolve import detect
from ckpt_tools.model import checkpoint as checkpoint_module
from ckpt_tools.pipeline import analyze
from ckpt_tools.repair import fix_prefix
from ckpt_tools.repair.guard import resolve_local
from ckpt_tools.repair.predict import after_checkpoint
from ckpt_tools.repair.runner import _plan
from tests.repair_helpers import MISNESTED_FIXTURE, add_tensors, copy_of


def everything(det) -> tuple:
    """Every field of a detection, the classes and rows in order (a carried class may be the before-state's object:
    compared by value)."""
    return (
        [(f.name, getattr(det, f.name)) for f in dataclasses.fields(det) if f.name not in ("rows", "classes", "carry")],
        list(det.rows),
        list(det.classes),
        det.activation_mode,
        det.disk_activation_mode,
    )


@pytest.fixture
def carried(monkeypatch):
    """Records whether each detection offered a carry took it (`_carried` answered); small fixtures: no share limit
    on the modules changed, for the detection or the grouping it relies on."""
    monkeypatch.setattr(resolve, "_CARRY_AT_MOST", 1.0)
    monkeypatch.setattr(checkpoint_module, "_CARRY_AT_MOST", 1.0)
    calls: list[bool] = []
    real = resolve._carried

    def spy(ckpt, *args):
        out = real(ckpt, *args)
        if resolve._CARRY_HINT in vars(ckpt):
            calls.append(out is not None)
        return out

    monkeypatch.setattr(resolve, "_carried", spy)
    return calls


def _after(folder, pairs):
    analysis = analyze(str(folder), headers_only=True)
    plan, steps = _plan(analysis, fix_prefix.job(pairs), str(folder), resolve_local(str(folder)), writable=False)
    assert steps
    return analysis, after_checkpoint(analysis.checkpoint, plan, steps, analysis.detection)


def _changed_rows(before, after) -> set[str]:
    """Names of the after-state's rows that are not a before-state row with the same fields."""
    old = set(before.rows)
    return {r.name for r in after.rows if r not in old}


CASES = {
    # compressed-tensors: the vision tower leaves the text component and its blocks meet the ignore list
    "misnested vision tower (component, ignore entry)": (MISNESTED_FIXTURE, []),
    # ModelOpt: a router leaves its forced-unquantized pattern and its exclude entry (declared NVFP4 on BF16 tensors)
    "router renamed out of its pattern": (
        "modelopt-qwen3moe-nvfp4",
        [("model.layers.0.mlp.gate", "model.layers.0.mlp.router")],
    ),
    # compressed-tensors: a projection renamed into the shared-expert-gate pattern (built unquantized)
    "projection renamed into a forced pattern": (
        "llmc-qwen3moe-nvfp4",
        [("model.layers.1.self_attn.q_proj", "model.layers.1.shared_expert_gate")],
    ),
    # the first module of the checkpoint moves: class order and the sorted rows change
    "attention moved to another layer name": (
        "modelopt-qwen3moe-nvfp4",
        [("model.layers.1.self_attn", "model.layers.7.self_attn")],
    ),
}


@pytest.mark.parametrize(("fixture", "pairs"), CASES.values(), ids=CASES.keys())
def test_carried_detection_is_detect(tmp_path, carried, fixture, pairs):
    folder = copy_of(fixture, tmp_path)
    analysis, after = _after(folder, pairs)
    det = detect(after)
    assert carried == [True]
    fresh = detect(dataclasses.replace(after))  # no offer, no cached views: detected from scratch
    assert carried == [True]
    assert everything(det) == everything(fresh)
    # The rename changed rows that a plain carry of the before-state would have kept wrong.
    assert _changed_rows(analysis.detection, det)
    # The carry is offered on again (a chain of after-states), and kept classes are the before-state's objects.
    assert det.carry is not None and det.carry.ckpt is after
    kept = {id(c) for c in analysis.detection.classes}
    assert any(id(c) in kept for c in det.classes)


def test_a_carried_class_keeps_no_dropped_module(tmp_path, carried):
    """The renamed modules' old rows leave the after-state and their new rows join it (component and ignore entry
    from the new names)."""
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    analysis, after = _after(folder, [])
    det = detect(after)
    assert carried == [True]
    names = {r.name for r in det.rows}
    assert not any(n.startswith("model.language_model.visual.") for n in names)
    vision = [r for r in det.rows if r.name.startswith("model.visual.")]
    assert vision and {r.component for r in vision} == {"vision"}
    before_vision = [r for r in analysis.detection.rows if r.name.startswith("model.language_model.visual.")]
    assert {(r.covered_by is None) for r in before_vision} != {(r.covered_by is None) for r in vision}


def test_carry_declines_when_experts_or_layouts_change(tmp_path, carried):
    folder = copy_of("modelopt-qwen3moe-nvfp4", tmp_path)
    _analysis, after = _after(folder, [("model.layers.1.mlp.experts", "model.layers.1.mlp.moved_experts")])
    det = detect(after)
    assert carried == [False]  # the expert groups were filed again: detected afresh
    assert everything(det) == everything(detect(dataclasses.replace(after)))

    folder = copy_of("modelopt-llama-nvfp4", tmp_path / "layout")
    name = "model.layers.0.self_attn.q_proj"
    rows = analyze(str(folder), headers_only=True).checkpoint.modules[name].weight.shape[0]
    add_tensors(folder, [(f"stray.{name}.bias", "BF16", [rows], b"\x00\x00" * rows)], beside=f"{name}.weight")
    _analysis, after = _after(folder, [("stray", "")])
    det = detect(after)
    assert carried[-1] is False  # a module's layout changed: the layout table differs
    assert everything(det) == everything(detect(dataclasses.replace(after)))


def test_carry_declines_another_runtime_or_config(tmp_path, carried):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    analysis, after = _after(folder, [])
    other = next(r for r in resolve.load_runtime.__globals__["runtime_ids"]() if r != analysis.detection.runtime.id)
    det = detect(after, other)
    assert carried == [False]
    assert everything(det) == everything(detect(dataclasses.replace(after), other))
    reconfigured = dataclasses.replace(after, config=dict(after.config or {}))
    resolve.carry_detection(reconfigured, analysis.detection)
    detect(reconfigured)
    assert carried[-1] is False  # another config object: its answers are not taken on trust


COMPONENT_CASES = {
    "the vision tower re-rooted (same components)": [],
    "a layer moved under the MTP root (a component appears, a head empties)": [
        ("model.language_model.layers.1", "mtp.layers.1")
    ],
    "the vision tower folded into a text layer (a component disappears)": [
        ("model.language_model.visual", "model.language_model.layers.1.extra")
    ],
    "a layer moved out of every root (its names decide: a component appears)": [
        ("model.language_model.layers.1", "extra.layers.1")
    ],
}


@pytest.mark.parametrize("pairs", COMPONENT_CASES.values(), ids=COMPONENT_CASES.keys())
def test_carried_components_are_the_components_of_every_name(tmp_path, carried, monkeypatch, pairs):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    analysis, after = _after(folder, pairs)
    family = analysis.detection.family
    resolve.tensor_components(analysis.checkpoint, family)  # as the before-state's missing-component rule asks
    took: list[bool] = []
    real = resolve._carried_components

    def spy(*args):
        out = real(*args)
        took.append(out is not None)
        return out

    monkeypatch.setattr(resolve, "_carried_components", spy)
    found = resolve.tensor_components(after, family)
    assert took == [True]
    assert found == {resolve.component_of(n, family) for n in after.tensors}
    assert found == resolve.module_components(after.modules, family)
    assert resolve.tensor_components(after, family) is found  # remembered
    if pairs:  # the case changes the answer: carrying the before-state's set would be wrong
        before = {resolve.component_of(n, family) for n in analysis.checkpoint.tensors}
        assert found != before


def test_carried_indexed_files_are_the_new_maps_files(tmp_path):
    """A rename of index keys alone keeps the index's file set: the after-state takes the before-state's."""
    folder = copy_of("llmc-qwen3moe-nvfp4-sharded", tmp_path)
    analysis = analyze(str(folder), headers_only=True)
    assert analysis.checkpoint.indexed_files  # computed by the analysis
    pairs = [("model.layers.1.self_attn", "model.layers.1.attn")]
    plan, steps = _plan(analysis, fix_prefix.job(pairs), str(folder), resolve_local(str(folder)), writable=False)
    after = after_checkpoint(analysis.checkpoint, plan, steps, analysis.detection)
    assert vars(after)["indexed_files"] is analysis.checkpoint.indexed_files
    assert after.index is not None and after.index is not analysis.checkpoint.index
    assert after.indexed_files == frozenset(after.index.weight_map.values())
    assert after.loaded_shards == dataclasses.replace(after).loaded_shards
