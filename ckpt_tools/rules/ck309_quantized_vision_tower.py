from __future__ import annotations

from collections.abc import Iterable

from ._classes import in_row_order, row_classes
from .base import Context, Finding, Rule, module_files, register


@register
class QuantizedVisionTower(Rule):
    """The vision tower is quantized.

    What it catches
    Linear layers of the vision component (`model.visual.*`, `vision_tower.*`, `vision_model.*`) that the config
    quantizes and whose tensors are quantized (U8 / F8 / packed ints) (docs/reference/failures.md #21). Towers whose
    config and tensors disagree are ignore-list-mismatch (CK301).

    Why it matters
    Both producers' recipes keep the tower BF16 (llm-compressor ignores `re:.*visual.*`, ModelOpt disables
    `*visual*`; docs/reference/quantizers.md), and so do the loaders' assumptions: vLLM always builds ModelOpt
    `vision_tower` / `vision_model` towers unquantized (vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.3)), and transformers, SGLang and mmproj
    converters expect BF16 towers, so image requests fail or the tower cannot be read back. Where it loads, the
    small vision matmuls gain nothing from 4/8-bit kernels while image accuracy drops.

    Anti-pattern
    A recipe that targets every `Linear` without excluding the vision tower, or an exclude pattern written in
    checkpoint naming that vLLM's names do not match.

    Fix
    Re-export with the tower excluded: llm-compressor `ignore=["re:.*visual.*", ...]`, ModelOpt
    `"*visual*": {"enable": False}`; keep the tower's modules in the config's ignore / exclude list.
    """

    code = "CK309"
    slug = "quantized-vision-tower"
    severity = "warning"
    title = "Quantized vision tower"

    def check(self, ctx: Context) -> Iterable[Finding]:
        # Per row class (`_classes.row_classes`): the test reads the row's component and schemes, which are its class's.
        tower = [
            (c.names, c.row.disk.label)
            for c in row_classes(ctx)
            if c.row.component == "vision" and c.row.disk.quantized and c.row.declared.quantized
        ]
        if not tower:
            return
        rows = list(in_row_order(tower))
        names = [name for name, _ in rows]
        labels = sorted({label for _, label in rows})
        yield self.finding(
            f"{len(rows)} vision-tower linear(s) are quantized ({', '.join(labels)}), e.g. `{names[0]}`: loaders and "
            f"converters expect a BF16 tower, image accuracy drops and some runtimes cannot load it. Re-export with "
            f"the vision tower in the ignore list.",
            tensors=names,
            files=module_files(ctx.ckpt, names),
        )
