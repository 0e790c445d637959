from __future__ import annotations

from collections.abc import Iterable

from ._load_model import findings_of
from .base import Context, Finding, Rule, register


@register
class LoadShapeMismatch(Rule):
    """A tensor's shape or packing does not fit the parameter vLLM builds from the config.

    What it catches
    Packed weights whose width along the input does not match the config's quantization arguments: e.g.
    `num_bits: 8` in the config with 4-bit `weight_packed` on disk (half the int32 words vLLM allocates), as the load
    model computes them from the config's dimensions (docs/reference/load-model.md). Scale tensors of the wrong shape
    are scale-shape-mismatch (CK403).

    Why it matters
    Column-parallel and fused loaders assert the shape and fail the load; row-parallel loaders `narrow` along the
    input: a narrower tensor raises "start (0) + length (N) exceeds dimension size (M)", a wider one is cut silently
    and the layer computes with the wrong values (vllm/model_executor/layers/linear.py, vLLM 0.33.0).

    Anti-pattern
    Editing `num_bits`, `group_size` or `strategy` in config.json after export, or pairing a config with tensors from
    another recipe.

    Fix
    Make the config's quantization arguments match what is on disk (`ckpt inspect` shows both), or re-export.
    """

    code = "CK603"
    slug = "load-shape-mismatch"
    severity = "error"
    title = "Tensor shape does not fit its parameter"

    def check(self, ctx: Context) -> Iterable[Finding]:
        yield from findings_of(ctx, self.code)
