from __future__ import annotations

import shlex
from collections.abc import Iterable

from ..detect.resolve import detect
from ..knowledge.runtimes import runtime_ids
from ..model.checkpoint import Checkpoint
from .base import Context, Finding, Rule, files_of, register


def accepting_runtimes(ckpt: Checkpoint, current: str) -> tuple[str, ...]:
    """The runtime profiles (other than `current`) whose detection loads the checkpoint."""
    return tuple(rid for rid in runtime_ids() if rid != current and detect(ckpt, rid).rejection is None)


@register
class UnsupportedQuantAlgo(Rule):
    """The targeted runtime does not load this quantization algo or config.

    What it catches
    Everything vLLM's config layer rejects for the runtime profile (default: upstream vLLM 0.33; see
    rules/runtimes/): ModelOpt algos outside its list (`NVFP4_AWQ`, `NVFP4_SVD`, `W4A8_AWQ`, ...), unknown algos in
    a legacy hf_quant_config.json-only checkpoint, NVFP4 nested configs missing required fields, MIXED_PRECISION
    without `quantized_layers`, compressed-tensors groups no scheme implements, unknown `quant_method`s, and AWQ
    `pre_quant_scale` tensors the runtime has no parameter for (vllm/transformers_utils/config.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.1); vllm/model_executor/layers/quantization/modelopt.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.3); vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.2)).

    Why it matters
    vLLM refuses to start (`ModelOpt currently only supports: [...]`, `Unknown ModelOpt quant algo`, ...) after the
    whole download, or fails at load on the first tensor it has no parameter for.

    Anti-pattern
    Exporting with ModelOpt `NVFP4_AWQ_LITE_CFG` and serving with upstream vLLM.

    Fix
    Re-export with a scheme the runtime loads, or choose a runtime profile that loads it (the finding's fix names the
    first, as a `ckpt serve-flags --runtime` command; `details.alternatives` lists them all). check-serve and serve-flags report this same finding for a
    command on that runtime (it folds the former CS111 checkpoint-rejected).
    """

    code = "CK310"
    slug = "unsupported-quant-algo"
    severity = "error"
    title = "Runtime does not load this quantization"

    def check(self, ctx: Context) -> Iterable[Finding]:
        det = ctx.det
        hints = det.runtime.hints
        hint = hints.get(det.quant_algo or "") if det.quant_algo else None
        source = det.config.source
        if det.rejection:
            message = f"{det.runtime.name} refuses this checkpoint: {det.rejection}"
            if hint:
                message += f" Fix: {hint}."
            alternatives = accepting_runtimes(ctx.ckpt, det.runtime.id)
            yield self.finding(
                message,
                files=[ctx.det.config.file] if source else [],
                count=1,
                # serve-flags for a runtime that loads it (Hub targets too: nothing is rewritten)
                fix=f"ckpt serve-flags --runtime {alternatives[0]} {shlex.quote(ctx.target)}" if alternatives else None,
                details={
                    "runtime": det.runtime.id,
                    "quant_algo": det.quant_algo,
                    "alternatives": ", ".join(alternatives),
                },
            )
            return
        if det.runtime.quantization.modelopt.loads_pre_quant_scale:
            return
        # A tensor name ends in `.pre_quant_scale` exactly when its suffix is `pre_quant_scale` under a named module:
        # the layouts say which modules have one, with no pass over the tensor names.
        layouts = ctx.ckpt.layouts
        pqs = sorted(
            f"{module}.pre_quant_scale"
            for lid, layout in enumerate(layouts.layouts)
            if any(suffix == "pre_quant_scale" for suffix, _, _ in layout)
            for module in layouts.members[lid]
            if module
        )
        if pqs:
            files = files_of(ctx.ckpt, pqs)
            yield self.finding(
                f"{len(pqs)} AWQ `pre_quant_scale` tensor(s) are present but {det.runtime.name} has no parameter for "
                f"them: loading fails with \"There is no module or parameter named ...pre_quant_scale\". Re-export "
                f"without AWQ, or fold the pre-quant scales into the weights.",
                tensors=pqs,
                files=files,
            )
