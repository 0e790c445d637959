"""Repairs apply the plan their finding carries (`details`), never a plan of their own: each job is given an analysis
whose finding was edited, and must follow the edit (a repair that re-ran the rule would plan the original)."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import pytest

from ckpt_tools.errors import TargetError
from ckpt_tools.pipeline import Analysis, analyze
from ckpt_tools.repair import drop_orphans, fix_prefix, scrub_nan
from ckpt_tools.rules.ck201_misnested_prefix import MisnestedPrefix
from ckpt_tools.rules.ck302_orphan_scale import OrphanScale
from ckpt_tools.rules.ck501_nan_fp8_scale import NanFp8Scale
from tests.corrupt import patch_tensor_bytes
from tests.repair_helpers import MISNESTED_FIXTURE, add_tensors, copy_of

SCALE = "model.layers.0.mlp.down_proj.weight_scale"
OTHER = "model.layers.1.self_attn.q_proj.weight_scale"
OLD, NEW = "model.language_model.visual.", "model.visual."


def with_details(analysis: Analysis, slug: str, **details) -> Analysis:
    """`analysis` whose `slug` finding carries `details` (merged over the rule's own)."""
    findings = tuple(
        dataclasses.replace(f, details=MappingProxyType({**f.details, **details})) if f.slug == slug else f
        for f in analysis.report.findings
    )
    assert any(f.slug == slug for f in findings), slug
    return dataclasses.replace(analysis, report=dataclasses.replace(analysis.report, findings=findings))


def test_fix_prefix_applies_the_pairs_of_its_finding(tmp_path):
    folder = copy_of(MISNESTED_FIXTURE, tmp_path)
    analysis = analyze(str(folder), headers_only=True)
    [finding] = [f for f in analysis.report.findings if f.slug == MisnestedPrefix.slug]
    assert finding.details["rename"] == [{"from": OLD, "to": NEW, "count": 33}]
    # The finding, edited: move the tower somewhere the rule would never propose.
    edited = with_details(analysis, MisnestedPrefix.slug, rename=[{"from": OLD, "to": "tower.", "count": 33}])
    plan = fix_prefix.job().build(edited, str(folder))
    renames = {old: new for edit in plan.edits.values() for old, new in edit.renames.items()}
    assert len(renames) == 33
    assert all(old.startswith(OLD) and new == "tower." + old[len(OLD) :] for old, new in renames.items())
    assert plan.details["rename"] == [{"from": OLD, "to": "tower.", "count": 33}]


def test_scrub_nan_patches_the_tensors_its_finding_names(tmp_path):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    patch_tensor_bytes(folder, SCALE, {0: 0x7F, 7: 0xFF})
    patch_tensor_bytes(folder, OTHER, {5: 0x7F})
    analysis = analyze(str(folder))
    [finding] = [f for f in analysis.report.findings if f.slug == NanFp8Scale.slug]
    assert finding.details["nan_bytes"] == {SCALE: 2, OTHER: 1}
    scale = analysis.checkpoint.tensors[SCALE]
    assert finding.details["scales"][SCALE] == {
        "shard": scale.shard,
        "data_offsets": [scale.begin, scale.end],
        "encoding": "F8_E4M3",
    }
    # A plan naming one of the two tensors scrubs that one only, although the bytes of both hold NaN codes.
    edited = with_details(analysis, NanFp8Scale.slug, nan_bytes={SCALE: 2})
    plan = scrub_nan.job().build(edited, str(folder))
    patches = [p for edit in plan.edits.values() for p in edit.patches]
    assert [(p.tensor, p.position, p.old, p.new) for p in patches] == [(SCALE, 0, 0x7F, 0x7E), (SCALE, 7, 0xFF, 0x7E)]
    assert plan.details["nan_bytes"] == {SCALE: 2}


def test_scrub_nan_refuses_a_plan_the_headers_do_not_match(tmp_path):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    patch_tensor_bytes(folder, SCALE, {0: 0x7F})
    analysis = analyze(str(folder))
    [finding] = [f for f in analysis.report.findings if f.slug == NanFp8Scale.slug]
    where = dict(finding.details["scales"][SCALE])
    where["data_offsets"] = [where["data_offsets"][0] + 1, where["data_offsets"][1] + 1]
    edited = with_details(analysis, NanFp8Scale.slug, scales={SCALE: where})
    with pytest.raises(TargetError, match="where the header does not hold it"):
        scrub_nan.job().build(edited, str(folder))
    # An encoding without NaN codes is refused, not guessed.
    where = {**finding.details["scales"][SCALE], "encoding": "BF16"}
    with pytest.raises(TargetError, match="BF16, which has no NaN byte"):
        scrub_nan.job().build(with_details(analysis, NanFp8Scale.slug, scales={SCALE: where}), str(folder))
    # A count the bytes do not bear out is refused too (the file changed between the scan and the plan).
    recount = with_details(analysis, NanFp8Scale.slug, nan_bytes={SCALE: 3})
    with pytest.raises(TargetError, match="3 NaN byte"):
        scrub_nan.job().build(recount, str(folder))


def test_drop_orphans_drops_the_tensors_its_finding_names(tmp_path):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    orphans = [
        ("lm_head.input_scale", "F32", [], b"\x00\x00\x80\x3f"),
        ("lm_head.weight_scale_2", "F32", [], b"\x00\x00\x80\x3f"),
    ]
    add_tensors(folder, orphans, beside="lm_head.weight")
    analysis = analyze(str(folder), headers_only=True)
    [finding] = [f for f in analysis.report.findings if f.slug == OrphanScale.slug]
    assert finding.details["orphans"] == sorted(name for name, *_ in orphans)
    edited = with_details(analysis, OrphanScale.slug, orphans=["lm_head.input_scale"])
    plan = drop_orphans.job().build(edited, str(folder))
    assert plan.index_drops == {"lm_head.input_scale"}
    assert {name for edit in plan.edits.values() for name in edit.drops} == {"lm_head.input_scale"}
