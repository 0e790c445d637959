"""The memory plan's weight bytes (`plan.weights.weights`) are made in whole-list steps, with components answered
once per module prefix (`detect.resolve.components_of`): both must give exactly what the per-tensor definitions give
(`component_lookup` / `component_of` per name, `nbytes` and `split_across_ranks` per tensor), on every genuine
fixture at several tensor-parallel sizes and on names whose prefixes do not fix their component (top-level names,
markers below a root, mis-nested copies, a repeated name, empty tensors)."""

from __future__ import annotations

from collections import Counter

import pytest

from ckpt_tools.detect.resolve import component_batches, component_lookup, component_of, components_of
from ckpt_tools.model.tensors import TensorInfo
from ckpt_tools.pipeline import analyze
from ckpt_tools.plan import facts
from ckpt_tools.plan import weights as weights_module
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
def test_weights_equal_the_per_tensor_sums(fixture: str, monkeypatch: pytest.MonkeyPatch) -> None:
    analysis = analyze(str(GENUINE / fixture), headers_only=True)
    family = analysis.detection.family
    tensors = list(analysis.checkpoint.tensors.values())
    for tp in (1, 2, 8):
        assert weights(tensors, family, tp) == _per_tensor(tensors, family, tp)
    monkeypatch.setattr(weights_module, "BATCH", 7)  # many batches; a module's tensors straddle two
    assert weights(iter(tensors), family, 2) == _per_tensor(tensors, family, 2)
    names = [t.name for t in tensors]
    lookup = component_lookup(family)
    assert components_of(names, family) == [lookup(n) for n in names] == [component_of(n, family) for n in names]
    batches = component_batches(family)
    assert [c for i in range(0, len(names), 5) for c in batches(names[i : i + 5])] == components_of(names, family)


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


def test_serve_flags_sizes_the_weights_once_per_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """serve-flags plans memory twice (fitting its command, then checking it); the weights are summed once per
    checkpoint and tensor-parallel size, and a changed checkpoint (`replace`) is summed anew."""
    import dataclasses

    from ckpt_tools.serve import serve_flags

    calls: list[int] = []
    real = weights_module.weights

    def counted(tensors, family, tp):
        calls.append(tp)
        return real(tensors, family, tp)

    monkeypatch.setattr(weights_module, "weights", counted)
    plan = serve_flags(str(GENUINE / "llmc-qwen35moe-nvfp4"), hardware="gb10", headers_only=True)
    assert plan.memory is not None and calls == [1]
    analysis = analyze(str(GENUINE / "llmc-qwen35moe-nvfp4"), headers_only=True)
    ckpt, family = analysis.checkpoint, analysis.detection.family
    first = weights_module.checkpoint_weights(ckpt, family, 1)
    assert weights_module.checkpoint_weights(ckpt, family, 1) is first and calls == [1, 1]
    assert weights_module.checkpoint_weights(ckpt, family, 2) == _per_tensor(list(ckpt.tensors.values()), family, 2)
    fewer = dataclasses.replace(ckpt, shards=ckpt.shards[:0])
    assert weights_module.checkpoint_weights(fewer, family, 1).bytes == 0 and calls == [1, 1, 2, 1]
