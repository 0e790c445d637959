from __future__ import annotations

from collections.abc import Iterable

from ._load_model import accounting, findings_of
from .base import Context, Finding, Rule, register
from .ck308_block_fp8_tp_sizes import ruled_out


@register
class ModelBuildFailed(Rule):
    """vLLM cannot build the model class, or one of its layers, for this config.

    What it catches
    A layer the config asks vLLM to build in a way its code refuses before any weight is read (the load model,
    docs/reference/load-model.md): e.g. a compressed-tensors embedding quantized with anything but weight-only INT
    (WNA16). Configs vLLM rejects as a whole are unsupported-quant-algo (CK310) and unsupported-architecture (CK312);
    a layer whose FP8 block shape vLLM refuses even on one GPU is block-fp8-tp-sizes (CK308).

    Why it matters
    The server stops while constructing the model: nothing loads.

    Anti-pattern
    Quantizing layers with a scheme their vLLM class cannot build (NVFP4 or FP8 embeddings).

    Fix
    Leave the layer unquantized (add it to `ignore`), or quantize it with a scheme its class supports.
    """

    code = "CK605"
    slug = "model-build-failed"
    severity = "error"
    title = "vLLM cannot build the model"

    def check(self, ctx: Context) -> Iterable[Finding]:
        if ctx.det.rejection is not None:  # a config vLLM refuses as a whole is CK310's / CK312's verdict
            return
        if _block_shape_refusal(ctx):  # block-fp8-tp-sizes (CK308) names it, with the sizes that do work
            return
        yield from findings_of(ctx, self.code)


def _block_shape_refusal(ctx: Context) -> bool:
    """Whether the build failed on the layer whose FP8 block shape vLLM refuses at one GPU (the size the model is
    built at to judge its load)."""
    error = accounting(ctx).build_error
    if error is None:
        return False
    refusal = ruled_out(ctx, 1)
    layer = refusal[0].partition(":")[0] if refusal else None  # a reason starts with the layer it names
    return layer is not None and f"`{layer}`" in error
