"""`rules.base.module_files` answers shard by shard when asked about most of a checkpoint's modules; both paths must
name exactly the shards that hold the modules' tensors (as the tensor map has them)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ckpt_tools.read import open_source
from ckpt_tools.read.loader import load_checkpoint
from ckpt_tools.rules.base import module_files
from tests.case_ops import apply

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GENUINE = sorted(p for p in (FIXTURES / "genuine").iterdir() if p.is_dir())


def _direct(ckpt, names) -> set[str]:
    """The definition: the shard of every tensor of every named module."""
    return {t.shard for n in names if n in ckpt.modules for t in ckpt.modules[n].tensors.values()}


def _subsets(ckpt):
    names = list(ckpt.modules)
    yield names  # every module: the shard-by-shard path
    yield names[1:]  # all but one
    yield names[: len(names) // 2 + 1]  # just over half
    yield names[::3]  # a third: the per-tensor path
    yield [*names, "not.a.module"]  # unknown names are ignored on both paths


@pytest.mark.parametrize("folder", GENUINE, ids=lambda p: p.name)
def test_both_paths_name_the_shards_of_the_modules_tensors(folder: Path) -> None:
    ckpt = load_checkpoint(open_source(str(folder)))
    for names in _subsets(ckpt):
        assert module_files(ckpt, names) == _direct(ckpt, names)


def _sharded(tmp_path: Path, steps=()) -> object:
    folder = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / "genuine" / "llmc-qwen3moe-nvfp4-sharded", folder)
    apply(folder, list(steps))
    return load_checkpoint(open_source(str(folder)))


def _off_last_shard(ckpt) -> list[str]:
    """The modules none of whose tensors (as the tensor map has them) lie in the last loaded shard."""
    last = ckpt.loaded_shards[-1].name
    return [n for n, m in ckpt.modules.items() if all(t.shard != last for t in m.tensors.values())]


def test_a_shard_holding_only_unnamed_modules_is_left_out(tmp_path: Path) -> None:
    ckpt = _sharded(tmp_path)
    names = _off_last_shard(ckpt)
    assert 2 * len(names) > len(ckpt.modules), "the case must take the shard-by-shard path"
    assert ckpt.loaded_shards[-1].name not in module_files(ckpt, names)
    assert module_files(ckpt, names) == _direct(ckpt, names)


def test_a_duplicate_in_a_later_shard_does_not_count(tmp_path: Path) -> None:
    """The tensor map keeps a repeated name's first loaded shard; the copy in the last shard is not the module's."""
    copy = {
        "op": "copy_tensor",
        "from": "model.embed_tokens.weight",
        "to": "model.embed_tokens.weight",
        "into": "model-00003-of-00003.safetensors",
        "index": False,
    }
    ckpt = _sharded(tmp_path, [copy])
    assert "model.embed_tokens.weight" in ckpt.duplicate_tensors
    names = _off_last_shard(ckpt)
    assert "model.embed_tokens" in names  # its tensor map entry is the first shard's
    assert 2 * len(names) > len(ckpt.modules), "the case must take the shard-by-shard path"
    assert module_files(ckpt, names) == _direct(ckpt, names)
    assert ckpt.loaded_shards[-1].name not in module_files(ckpt, names)
    for subset in _subsets(ckpt):
        assert module_files(ckpt, subset) == _direct(ckpt, subset)
