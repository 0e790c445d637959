from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from ..knowledge.scales import global_scale_conventions
from ..model.modules import ROLES, join_name
from ..model.tensors import TensorInfo
from ..model.values import WIDE_FLOAT_DTYPES
from ._values import stats, usable_scalar
from .base import Context, Finding, Rule, files_of, register

# NVFP4 global scales relate the weight's amax to FP4 x E4M3 range, 6 x 448 = 2688 (vllm/model_executor/layers/quantization/compressed_tensors/schemes, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.3); vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.1)).
# direct (ModelOpt):  scale = amax / 2688  -> above 1 only if |w| > 2688, which no trained linear has;
# reciprocal (CT):    scale = 2688 / amax  -> below 1 only in the same impossible case.
BOUNDARY = 1.0


@cache
def _convention_suffixes() -> frozenset[str]:
    return frozenset(global_scale_conventions())


def misplaced(ctx: Context) -> list[tuple[str, str, float]]:
    """(tensor, its name's convention, value) for NVFP4 weight global scales whose value fits the other convention,
    in row order (by module name), each module's tensors in header order."""
    if not ctx.ckpt.values:
        return []
    conventions = global_scale_conventions()
    found: list[tuple[str, int, str, str, float]] = []
    for c in ctx.det.classes:
        if c.disk.kind != "nvfp4":
            continue
        # A class's members share their layout, which fixes a module's suffixes in their order: the first member's
        # global-scale suffixes are every member's.
        suffixes = [
            (suffix, conventions[suffix])
            for suffix in ctx.ckpt.modules[c.names[0]].tensors
            if conventions.get(suffix) is not None and ROLES.get(suffix) == "weight_global_scale"
        ]
        for module in c.names:
            for position, (suffix, convention) in enumerate(suffixes):
                name = join_name(module, suffix)
                value = usable_scalar(stats(ctx.ckpt, name))  # NaN when unread or unusable (invalid-scale-value's)
                if (convention == "direct" and value > BOUNDARY) or (convention == "reciprocal" and value < BOUNDARY):
                    found.append((module, position, name, convention, value))
    found.sort(key=lambda f: (f[0], f[1]))
    return [(name, convention, value) for _module, _position, name, convention, value in found]


@register
class MixedScaleConvention(Rule):
    """NVFP4 global scales stored in the other producer's convention (direct vs reciprocal).

    What it catches
    ModelOpt stores NVFP4 weight global scales directly (`weight_scale_2 = amax / (6 x 448)`, around 1e-5..1e-3);
    compressed-tensors stores the reciprocal (`weight_global_scale = (6 x 448) / amax`, around 1e3..1e5;
    vllm/model_executor/layers/quantization/compressed_tensors/schemes, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.3)). A `weight_scale_2` above 1, or a `weight_global_scale` below 1, would need a weight whose
    magnitude exceeds 2688: the value was written in the other convention (docs/reference/failures.md #18). Which
    tensor names fit which producer is quant-config-mismatch's (CK304); this rule reads the values (a few bytes per
    module) and is skipped with `--headers-only`.

    Why it matters
    vLLM dequantizes with the name's convention (ModelOpt: `weight_global_scale = max(weight_scale_2)`;
    compressed-tensors: `1 / max(weight_global_scale)`). A reciprocal value under a direct name scales every weight
    of the layer by roughly amax^2 / 2688^2: garbage or near-zero output from a model that loads without a warning.

    Anti-pattern
    Converting between ModelOpt and compressed-tensors by renaming tensors (`weight_global_scale` ->
    `weight_scale_2`) without inverting the values, or merging shards from both producers.

    Fix
    Convert with the producers' own tooling (llm-compressor's `convert_checkpoint` entrypoint), or invert the values
    together with the rename; then re-check with `ckpt doctor`.
    """

    code = "CK307"
    slug = "mixed-scale-convention"
    severity = "error"
    title = "Global scales in the other producer's convention"
    needs_values = True

    @classmethod
    def wants_values(cls, tensor: TensorInfo) -> bool:
        """One-element float weight global scales whose name has a convention (rules/ scale tables)."""
        suffix = tensor.name.rpartition(".")[2]
        return (
            tensor.dtype in WIDE_FLOAT_DTYPES
            and suffix in _convention_suffixes()
            and ROLES.get(suffix) == "weight_global_scale"
            and tensor.numel == 1
        )

    def check(self, ctx: Context) -> Iterable[Finding]:
        found = misplaced(ctx)
        if not found:
            return
        name, convention, value = found[0]
        other = "reciprocal (compressed-tensors)" if convention == "direct" else "direct (ModelOpt)"
        expected = "amax / 2688, far below 1" if convention == "direct" else "2688 / amax, far above 1"
        yield self.finding(
            f"{len(found)} NVFP4 weight global scale(s) hold values of the {other} convention under a "
            f"{convention}-convention name (e.g. `{name}` = {value:.6g}; this name stores {expected}); vLLM "
            f"dequantizes those layers with a wildly wrong scale. Convert with the producer's tooling or invert the "
            f"values.",
            tensors=[n for n, _, _ in found],
            files=files_of(ctx.ckpt, (n for n, _, _ in found)),
            details={"values": {n: v for n, _, v in found[:200]}, "name_convention": convention},
        )
