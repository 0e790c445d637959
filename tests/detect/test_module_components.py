"""`detect.resolve.module_components` (CK306's test for an absent component) answers once per four-segment head;
it must equal `component_of` of every tensor name, on every genuine fixture and on names whose head decides
nothing (top-level names, short prefixes, markers below a root, mis-nested copies, a marker as a tensor's suffix)."""

from __future__ import annotations

import pytest

from ckpt_tools.detect.resolve import component_of, module_components
from ckpt_tools.model.layouts import group_checkpoint
from ckpt_tools.model.tensors import TensorInfo
from ckpt_tools.pipeline import analyze
from tests.corrupt import GENUINE, genuine_entries

ODD = [
    "model.language_model.visual.blocks.0.attn.qkv.weight",
    "model.language_model.layers.0.visual.x.weight",
    "model.language_model.layers.0.mtp.fc.weight",
    "model.language_model.layers.3.mlp.visual",
    "model.language_model.visual",
    "model.visual.blocks.0.attn.qkv.weight",
    "foo.bar.baz.qux.visual.weight",
    "foo.bar.baz.qux.weight",
    "foo.bar.mtp",
    "mtp.layers.0.x",
    "visual",
    "weight",
    "a.b",
    "",
]


@pytest.mark.parametrize("fixture", genuine_entries())
def test_module_components_are_the_components_of_every_name(fixture: str) -> None:
    analysis = analyze(str(GENUINE / fixture), headers_only=True)
    ckpt, family = analysis.checkpoint, analysis.detection.family
    assert module_components(ckpt.modules, family) == {component_of(n, family) for n in ckpt.tensors}


@pytest.mark.parametrize("fixture", ["llmc-qwen35moe-nvfp4", "modelopt-llama-nvfp4"])
def test_module_components_on_names_their_head_does_not_decide(fixture: str) -> None:
    analysis = analyze(str(GENUINE / fixture), headers_only=True)
    family = analysis.detection.family
    genuine = list(analysis.checkpoint.tensors.values())
    odd = [TensorInfo(n, "BF16", (2,), "x.safetensors", 0, 4) for n in ODD]
    pairs = [[a, b] for a in odd for b in odd if a is not b]  # small sets: a component answered wrongly shows
    for tensors in ([*odd, *genuine], [*genuine, *odd[::-1]], *pairs, *([t, *genuine[:9]] for t in odd)):
        expected = {component_of(t.name, family) for t in tensors}
        assert module_components(group_checkpoint(tensors)[0], family) == expected
    # Each decides on its own: a vision name below a text root, an MTP one, and the rest.
    assert {"vision", "mtp", "text"} <= module_components(group_checkpoint(odd)[0], family)
    assert module_components({}, family) == set()
