"""Recipes for publishing (issue 12): `--emit docker|compose|model-card` never bake the publisher's local path; they
serve the Hub repo id (given or inferred) or the documented /model mount, with --served-model-name."""

from __future__ import annotations

import shutil

import pytest

from ckpt_tools.serve import check_serve, serve_flags
from ckpt_tools.serve.emitters import EMITTERS
from ckpt_tools.serve.publish import infer_repo_id
from tests.cli.test_cli import ckpt
from tests.corrupt import GENUINE

CLEAN = GENUINE / "modelopt-llama-nvfp4"


@pytest.mark.parametrize("emit", ["docker", "compose", "model-card"])
def test_recipes_carry_no_local_path(tmp_path, emit) -> None:
    folder = tmp_path / "publisher-private-dir" / "llama-nvfp4"
    shutil.copytree(CLEAN, folder)
    proc = ckpt("serve-flags", str(folder), "--emit", emit)
    assert proc.returncode == 0, proc.stderr
    assert "publisher-private-dir" not in proc.stdout and str(tmp_path) not in proc.stdout
    assert "${MODEL_DIR:?" in proc.stdout and "/model" in proc.stdout
    assert "--served-model-name" in proc.stdout and "llama-nvfp4" in proc.stdout


def test_given_repo_id_is_served_from_the_hub(tmp_path) -> None:
    plan = serve_flags(str(CLEAN), container=True, repo_id="acme/llama-nvfp4")
    text = EMITTERS["docker"](plan)
    assert str(CLEAN) not in text and "serve acme/llama-nvfp4" in text and "-e HF_TOKEN" in text
    assert "--served-model-name acme/llama-nvfp4" in text and "/root/.cache/huggingface" in text
    assert [f for f in check_serve(str(CLEAN), text).findings if f.code.startswith("CS")] == []


def test_repo_id_inferred_from_a_cache_snapshot_and_a_hub_clone(tmp_path) -> None:
    snap = tmp_path / "hub" / "models--acme--llama-nvfp4" / "snapshots" / ("a" * 40)
    shutil.copytree(CLEAN, snap)
    assert infer_repo_id(str(snap)) == "acme/llama-nvfp4"
    clone = tmp_path / "clone"
    shutil.copytree(CLEAN, clone)
    (clone / ".git").mkdir()
    (clone / ".git" / "config").write_text('[remote "origin"]\n\turl = https://huggingface.co/acme/llama-x\n')
    assert infer_repo_id(str(clone)) == "acme/llama-x"
    assert infer_repo_id("acme/llama-nvfp4@main") == "acme/llama-nvfp4"
    assert infer_repo_id(str(CLEAN)) is None
    card = ckpt("serve-flags", str(snap), "--emit", "model-card").stdout
    assert "acme/llama-nvfp4" in card and str(tmp_path) not in card


def test_bad_repo_id_is_a_usage_error() -> None:
    proc = ckpt("serve-flags", str(CLEAN), "--emit", "docker", "--repo-id", "not a repo")
    assert proc.returncode == 2 and "not a Hub repo id" in proc.stderr
