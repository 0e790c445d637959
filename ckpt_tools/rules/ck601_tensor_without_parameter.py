from __future__ import annotations

from collections.abc import Iterable

from ._load_model import findings_of
from .base import Context, Finding, Rule, register


@register
class TensorWithoutParameter(Rule):
    """A tensor has no parameter to load into: vLLM's loader raises and the model never starts.

    What it catches
    Tensors whose name, after the model class's name mapping (hf_to_vllm_mapper, stacked q/k/v and gate/up, expert
    mapping), is not a parameter of the module vLLM builds for it, under the config's quantization (the load model,
    docs/reference/load-model.md): a packed `embed_tokens` where the class builds a plain embedding, a block-FP8
    `weight_scale` where vLLM builds `weight_scale_inv`, a `.weight` on an AWQ / GPTQ layer the config quantizes.
    Layers the ignore list gets wrong are ignore-list-mismatch (CK301); names outside the model's layout are
    misnested-prefix (CK201).

    Why it matters
    `AutoWeightsLoader` raises "There is no module or parameter named '...' in <Model>" on the first such tensor
    (vllm/model_executor/models/utils.py, vLLM 0.33.0), so the server does not start.

    Anti-pattern
    Quantizing a module the model class builds unquantized (an embedding matched by a name target, a router), storing
    scales under another method's names, or leaving a layer unquantized without listing it in
    `modules_to_not_convert` / `ignore`.

    Fix
    Make the config describe the tensors (list unquantized modules, use a class target such as `Embedding`), or
    re-export the affected modules with the producer.
    """

    code = "CK601"
    slug = "tensor-without-parameter"
    severity = "error"
    title = "Tensor with no parameter to load into"

    def check(self, ctx: Context) -> Iterable[Finding]:
        yield from findings_of(ctx, self.code)
