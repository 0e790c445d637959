from __future__ import annotations

from collections.abc import Iterable

from ._load_model import findings_of
from .base import Context, Finding, Rule, register


@register
class ParameterUnfilled(Rule):
    """A parameter vLLM builds is never filled by any tensor: the layer computes with uninitialised memory.

    What it catches
    Parameters of the modules vLLM builds for this checkpoint (the load model, docs/reference/load-model.md) that no
    tensor fills, or fused parameters (q/k/v, gate/up) with a part no tensor fills: e.g. block-FP8
    `weight_scale_inv` when the scales are stored as `weight_scale`. KV-cache scales (vLLM sets defaults) and the
    input scales a weight-only NVFP4 layer registers but never reads are exempt.

    Why it matters
    vLLM 0.33 checks for unfilled parameters only on unquantized models (`DefaultModelLoader.load_weights`,
    vllm/model_executor/model_loader/default_loader.py): on a quantized one the parameter keeps its `torch.empty`
    memory and the model serves garbage without an error.

    Anti-pattern
    Renaming or dropping scale tensors, exporting with a tool whose names vLLM does not map.

    Fix
    Store the missing tensors under the names vLLM expects, or declare the layer unquantized in the config if it is
    stored unquantized.
    """

    code = "CK602"
    slug = "parameter-unfilled"
    severity = "error"
    title = "Parameter no tensor fills"

    def check(self, ctx: Context) -> Iterable[Finding]:
        yield from findings_of(ctx, self.code)
