from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from itertools import compress

from ..knowledge.scales import global_scale_conventions
from ..model.modules import ROLES, join_name
from ..model.tensors import TensorInfo
from ..model.values import WIDE_FLOAT_DTYPES
from ._memo import once_per_detection
from ._value_columns import member_scalars, member_table
from .base import Context, Finding, Rule, files_of, register

# NVFP4 global scales relate the weight's amax to FP4 x E4M3 range, 6 x 448 = 2688 (vllm/model_executor/layers/quantization/compressed_tensors/schemes, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.3); vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.1)).
# direct (ModelOpt):  scale = amax / 2688  -> above 1 only if |w| > 2688, which no trained linear has;
# reciprocal (CT):    scale = 2688 / amax  -> below 1 only in the same impossible case.
BOUNDARY = 1.0


@cache
def _convention_suffixes() -> frozenset[str]:
    return frozenset(global_scale_conventions())


@once_per_detection
def _asked(ctx: Context) -> dict[int, list[tuple[str, str]]]:
    """Per NVFP4 row class (index into `member_table`'s classes), its (global-scale suffix, convention) pairs in header
    order: header facts only, made while the scan runs (`MixedScaleConvention.prepare`).

    WHY per class: a class's rows share their disk scheme and their layout, and a layout fixes a module's suffixes
    in their order, so which global-scale suffixes (and conventions) a member has is its class's."""
    conventions = global_scale_conventions()
    table = member_table(ctx)
    per_layout: dict[int, list[tuple[str, str]]] = {}
    asked: dict[int, list[tuple[str, str]]] = {}
    for k, c in enumerate(table.classes):
        if c.disk.kind != "nvfp4":
            continue
        suffixes = per_layout.get(c.layout)
        if suffixes is None:
            suffixes = per_layout[c.layout] = [
                (suffix, conventions[suffix])
                for suffix in ctx.ckpt.modules[c.names[0]].tensors
                if conventions.get(suffix) is not None and ROLES.get(suffix) == "weight_global_scale"
            ]
        if suffixes:
            asked[k] = suffixes
    return asked


def misplaced(ctx: Context) -> list[tuple[str, str, float]]:
    """(tensor, its name's convention, value) for NVFP4 weight global scales whose value fits the other convention,
    in row order (by module name), each module's tensors in header order."""
    if not ctx.ckpt.values:
        return []
    # Only the values differ between a class's members (`_asked`): each member's is tested, as a column, in C.
    table = member_scalars(ctx)
    asked = _asked(ctx)
    by_suffix: dict[str, list[int]] = {}
    for k, suffixes in asked.items():
        for suffix, _convention in suffixes:
            by_suffix.setdefault(suffix, []).append(k)
    columns = {suffix: table.column(suffix, ks) for suffix, ks in by_suffix.items()}  # one lookup pass per suffix
    found: list[tuple[str, int, str, str, float]] = []
    for k, suffixes in asked.items():
        start, end = table.starts[k], table.starts[k + 1]
        for position, (suffix, convention) in enumerate(suffixes):
            column = columns[suffix]  # NaN where unread or unusable (invalid-scale-value's)
            beyond = BOUNDARY.__lt__ if convention == "direct" else BOUNDARY.__gt__  # NaN compares False
            found.extend(
                (table.names[i], position, join_name(table.names[i], suffix), convention, column[i])
                for i in compress(range(start, end), map(beyond, column[start:end]))
            )
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

    @classmethod
    def prepare(cls, ctx: Context) -> None:
        """Which classes have which global-scale suffixes, and their tensors' names, from the headers."""
        table = member_table(ctx)
        for k, suffixes in _asked(ctx).items():
            for suffix, _convention in suffixes:
                table.tensor_names(suffix, k)

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
