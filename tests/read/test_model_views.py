"""Derived views are held outside the object they derive from (`model.views`): a `Checkpoint` takes no attribute,
each view is computed once per object and is the same object every time, a copy computes its own, and nothing is
held once the object is freed."""

from __future__ import annotations

import dataclasses
import gc

import pytest

from ckpt_tools.model import views
from ckpt_tools.read.loader import load_checkpoint
from ckpt_tools.read.local import LocalSource
from ckpt_tools.rules._memo import once_per_detection
from tests.corrupt import GENUINE


def test_a_checkpoint_takes_no_attribute_and_computes_each_view_once() -> None:
    ckpt = load_checkpoint(LocalSource(GENUINE / "llmc-qwen35moe-nvfp4"))
    with pytest.raises((AttributeError, TypeError)):
        ckpt.tensors_cache = {}  # type: ignore[attr-defined]
    assert not hasattr(ckpt, "__dict__")
    assert ckpt.tensors is ckpt.tensors and ckpt.modules is ckpt.modules and ckpt.layouts is ckpt.layouts
    copy = dataclasses.replace(ckpt, values_skipped="copied")
    assert copy.tensors is not ckpt.tensors and copy.tensors == ckpt.tensors


def test_a_view_lives_as_long_as_its_object() -> None:
    calls = []

    class Det:
        pass

    class Ctx:
        def __init__(self, det: Det) -> None:
            self.det = det

    @once_per_detection
    def view(ctx: Ctx) -> object:
        calls.append(ctx.det)
        return object()

    a, b = Det(), Det()
    first = view(Ctx(a))
    assert view(Ctx(a)) is first  # another context, the same detection: remembered
    assert view(Ctx(b)) is not first and view(Ctx(a)) is first and calls == [a, b]
    held = len(views._held)
    del a, b
    calls.clear()
    gc.collect()
    assert len(views._held) == held - 2


def test_value_data_keeps_the_header_views_and_nothing_else() -> None:
    from ckpt_tools.model.checkpoint import with_value_data
    from ckpt_tools.model.values import ValueStats

    ckpt = load_checkpoint(LocalSource(GENUINE / "llmc-qwen35moe-nvfp4"))
    modules, tensors = ckpt.modules, ckpt.tensors
    scanned = with_value_data(ckpt, values=ValueStats({}))
    assert scanned.values == ValueStats({}) and scanned.modules is modules and scanned.tensors is tensors
    with pytest.raises(ValueError):
        with_value_data(ckpt, shards=())
    fresh = with_value_data(load_checkpoint(LocalSource(GENUINE / "llmc-qwen35moe-nvfp4")), values=None)
    assert fresh.modules == modules and fresh.modules is not modules  # nothing computed before: its own
