"""Per-expert gaps (`rules._experts._gaps`, shared by CK401 / CK402 / CK403) compare each expert's projections as a
set: experts whose projection modules load in different orders (an expert split over two shards) have no gap, and
a gap next to such an order is still found, exactly as the direct per-expert comparison finds it."""

from __future__ import annotations

from ckpt_tools.model.checkpoint import Checkpoint
from ckpt_tools.model.tensors import Shard, TensorInfo
from ckpt_tools.rules._experts import _gaps
from tests.rules.test_per_class import _reference_gaps

SUFFIXES = ("weight", "weight_scale", "input_scale")


def _checkpoint(orders: dict[int, tuple[str, ...]], drop: str | None = None) -> Checkpoint:
    names = [f"model.layers.0.mlp.experts.{e}.{p}.{s}" for e, projs in orders.items() for p in projs for s in SUFFIXES]
    names = [n for n in names if n != drop]
    tensors = tuple(TensorInfo(n, "BF16", (2,), "a.safetensors", 4 * i, 4 * i + 4) for i, n in enumerate(names))
    shard = Shard("a.safetensors", 10 + 4 * len(tensors), 2, None, tensors, True)
    return Checkpoint("t", False, {"a.safetensors": shard.size}, ("a.safetensors",), (shard,))


ORDERS = {
    0: ("gate_proj", "up_proj", "down_proj"),
    1: ("up_proj", "down_proj", "gate_proj"),
    2: ("down_proj", "gate_proj", "up_proj"),
}


def test_projections_in_another_order_are_no_gap() -> None:
    ckpt = _checkpoint(ORDERS)
    assert len({tuple(p) for p in ckpt.experts["model.layers.0.mlp.experts"].experts.values()}) == 3
    assert _gaps(ckpt) == () and _reference_gaps(ckpt) == []


def test_a_gap_beside_another_order_is_found() -> None:
    ckpt = _checkpoint(ORDERS, drop="model.layers.0.mlp.experts.1.gate_proj.input_scale")
    got = [(g.layer, dict(g.missing), g.absent) for g in _gaps(ckpt)]
    assert got == _reference_gaps(ckpt)
    assert got == [("model.layers.0.mlp.experts", {"gate_proj.input_scale": (1,)}, ())]


def test_a_missing_projection_beside_another_order_is_found() -> None:
    orders = {**ORDERS, 1: ("up_proj", "down_proj")}
    ckpt = _checkpoint(orders)
    got = [(g.layer, dict(g.missing), g.absent) for g in _gaps(ckpt)]
    assert got == _reference_gaps(ckpt) and got[0][1] == {f"gate_proj.{s}": (1,) for s in SUFFIXES}
