"""The memory plan's weight bytes (`plan.weights.weights`), with components answered once per module prefix
(`detect.resolve.component_lookup`), give exactly what the per-tensor definitions give (`component_of` per name,
`nbytes` and `split_across_ranks` per tensor), on every genuine
fixture at several tensor-parallel sizes and on names whose prefixes do not fix their component (top-level names,
markers below a root, mis-nested copies, a repeated name, empty tensors)."""

from __future__ import annotations

from collections import Counter

import pytest

from ckpt_tools.detect.resolve import component_lookup, component_of, components_of
from ckpt_tools.model.tensors import TensorInfo
from ckpt_tools.pipeline import analyze
from ckpt_tools.plan import facts
from ckpt_tools.plan.weights import Weights, weights
from tests.corrupt import GENUINE, genuine_entries


def _per_tensor(tensors: list[TensorInfo], family, tp: int) -> Weights:
    by_component: Counter[str] = Counter()
    replicated = split = 0
    for t in tensors:
        by_component[component_of(t.name, family)] += t.nbytes
        if tp > 1 and facts.split_across_ranks(t.name, len(t.shape)):
            split += t.nbytes
        else:
            replicated += t.nbytes
    return Weights(
        bytes=replicated + split,
        per_device_bytes=replicated + -(-split // tp),
        by_component=dict(sorted(by_component.items())),
        replicated_bytes=replicated,
        split_bytes=split,
    )


ODD = [
    "model.language_model.visual.blocks.0.attn.qkv.weight",
    "model.language_model.visual.blocks.1.mlp.fc1.weight",
    "model.language_model.layers.0.visual.x.weight",
    "model.language_model.layers.0.mtp.fc.weight",
    "model.visual.blocks.0.attn.qkv.weight",
    "mtp.layers.0.x",
    "weight",
    "a.b",
    "",
]


@pytest.mark.parametrize("fixture", genuine_entries())
def test_weights_equal_the_per_tensor_sums(fixture: str) -> None:
    analysis = analyze(str(GENUINE / fixture), headers_only=True)
    family = analysis.detection.family
    tensors = list(analysis.checkpoint.tensors.values())
    for tp in (1, 2, 8):
        assert weights(tensors, family, tp) == _per_tensor(tensors, family, tp)
    assert weights(iter(tensors), family, 2) == _per_tensor(tensors, family, 2)
    names = [t.name for t in tensors]
    lookup = component_lookup(family)
    assert components_of(names, family) == [lookup(n) for n in names] == [component_of(n, family) for n in names]


def test_weights_on_names_their_prefix_does_not_decide() -> None:
    analysis = analyze(str(GENUINE / "llmc-qwen35moe-nvfp4"), headers_only=True)
    family = analysis.detection.family
    genuine = list(analysis.checkpoint.tensors.values())
    odd = [TensorInfo(n, "BF16", (2, 3), "x.safetensors", 0, 12 * (i % 3)) for i, n in enumerate(ODD)]
    tensors = [*odd, *genuine[:50], *odd[::-1], *genuine[50:], genuine[0]]  # genuine[0] twice: counted twice
    for tp in (1, 4):
        got = weights(tensors, family, tp)
        assert got == _per_tensor(tensors, family, tp)
    assert set(got.by_component) >= {"text", "vision", "other"} and got.split_bytes > 0
    assert got.bytes == sum(t.nbytes for t in tensors)
    assert components_of([], family) == [] and weights([], family, 2) == _per_tensor([], family, 2)
