"""drop-orphans: orphan scale tensors leave the headers and the index; every other tensor's bytes are identical, and
shards without orphans are not touched."""

from __future__ import annotations

import json

import pytest

from ckpt_tools.rules import base
from ckpt_tools.rules.base import Context, Rule
from tests.repair_helpers import (
    INDEX,
    add_tensors,
    assert_index_agrees,
    copy_of,
    file_bytes,
    leftovers,
    library_view,
    make_sharded,
    run_cli,
)

ORPHAN = ("lm_head.input_scale", "F32", [], b"\x00\x00\x80\x3f")
ORPHAN2 = ("model.layers.0.mlp.gate_proj.k_scale", "F32", [], b"\x00\x00\x00\x40")


def with_orphans(folder, *orphans):
    """Orphan scales beside lm_head.weight (a BF16 weight: nothing to scale), in its shard and the index."""
    return add_tensors(folder, list(orphans), beside="lm_head.weight")


def test_drop_explicit_tensor_single_file(tmp_path, capsys):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    original = library_view(folder)
    with_orphans(folder, ORPHAN)
    code, out, err = run_cli(["drop-orphans", folder, "--tensor", ORPHAN[0], "--format", "json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    step = result["plan"]["steps"][0]
    assert step["kind"] == "rewrite" and step["reason"] == "tensors dropped"
    assert result["copy_methods"]  # the data was moved by the kernel (copy_file_range or sendfile) or read/write
    assert library_view(folder) == original  # every remaining tensor: same name, dtype, shape, bytes
    assert leftovers(folder) == []


def test_sharded_index_updated_and_other_shards_untouched(tmp_path, capsys):
    folder = make_sharded(copy_of("modelopt-llama-nvfp4", tmp_path))
    original = library_view(folder)
    total = json.loads((folder / INDEX).read_text())["metadata"]["total_size"]
    shard = with_orphans(folder, ORPHAN, ORPHAN2)
    before = file_bytes(folder)
    code, out, err = run_cli(["drop-orphans", folder, "-t", ORPHAN[0], "-t", ORPHAN2[0]], capsys)
    assert code == 0, err
    assert "drop 2 orphan scale tensor(s) (8 bytes) from 1 shard(s)" in out
    after = file_bytes(folder)
    assert {k for k in after if after[k] != before[k]} == {shard.name, INDEX}
    assert library_view(folder) == original
    assert_index_agrees(folder)
    index = json.loads((folder / INDEX).read_text())
    assert index["metadata"]["total_size"] == total
    assert (folder / INDEX).read_text() == json.dumps(index, indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize(
    "names, message",
    [
        (["model.layers.0.mlp.down_proj.weight"], "is not a scale or zero point"),
        (
            ["model.layers.0.mlp.down_proj.input_scale", "model.layers.0.mlp.down_proj.inptu_scale"],
            "no tensor `model.layers.0.mlp.down_proj.inptu_scale`",
        ),
    ],
)
def test_refuses_anything_but_existing_scales(tmp_path, capsys, names, message):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    before = file_bytes(folder)
    code, _out, err = run_cli(["drop-orphans", folder, *(a for n in names for a in ("--tensor", n))], capsys)
    assert code == 2 and message in err
    assert file_bytes(folder) == before


def test_running_it_again_is_a_no_op(tmp_path, capsys):
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    with_orphans(folder, ORPHAN)
    assert run_cli(["drop-orphans", folder, "--tensor", ORPHAN[0]], capsys)[0] == 0
    before = file_bytes(folder)
    code, out, _ = run_cli(["drop-orphans", folder, "--tensor", ORPHAN[0]], capsys)
    assert code == 0 and "already dropped?" in out
    assert file_bytes(folder) == before


class StandInOrphanRule(Rule):
    """The orphan-scale contract (ck302): `tensors` may be truncated, `details["orphans"]` is the full list.

    What it catches
    Test stand-in.
    """

    code = "CK302"
    slug = "orphan-scale"
    severity = "error"
    title = "orphan scales (test stand-in)"
    fixable = True

    def check(self, ctx: Context):
        found = sorted(n for n in ctx.ckpt.tensors if n.startswith("lm_head.") and n != "lm_head.weight")
        if found:
            yield self.finding(
                "orphans",
                tensors=found[:1],
                count=len(found),
                fix=ctx.command("drop-orphans"),
                details={"orphans": found},
            )


def test_uses_the_full_list_of_the_orphan_scale_finding(tmp_path, capsys, monkeypatch):
    base.all_rules()  # load the real rules first, then put the stand-in in the orphan-scale slot
    registry = {c: r for c, r in base._RULES.by_code.items() if r.slug != "orphan-scale"}
    registry["CK302"] = StandInOrphanRule
    monkeypatch.setattr(base._RULES, "by_code", registry)
    folder = copy_of("modelopt-llama-nvfp4", tmp_path)
    original = library_view(folder)
    extra = ("lm_head.weight_scale_2", "F32", [], b"\x00\x00\x80\x3f")
    with_orphans(folder, ORPHAN, extra)
    code, out, err = run_cli(["drop-orphans", folder, "--format", "json"], capsys)
    assert code == 0, err
    result = json.loads(out)
    assert result["plan"]["details"]["orphans"] == sorted([ORPHAN[0], extra[0]])
    assert "CK302 orphan-scale" in result["before"]["findings"]
    assert "CK302 orphan-scale" not in result["after"]["findings"]
    assert library_view(folder) == original
    # and `ckpt fix` finds nothing left to do
    code, out, _ = run_cli(["fix", folder], capsys)
    assert code == 0 and "nothing to do" in out
