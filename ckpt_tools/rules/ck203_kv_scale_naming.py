from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ..knowledge.kv_scales import classify
from ._kv import kv_tensors
from .base import Context, Finding, Rule, files_of, register


@register
class KvScaleNaming(Rule):
    """KV-cache scales named in a spelling vLLM loads differently, or not at all, under this config.

    What it catches
    Every KV-cache scale is classified against the spellings in rules/kv_scales.toml (llm-compressor
    `self_attn.k_scale`, ModelOpt `self_attn.k_proj.k_scale`, fused `qkv_proj.k_scale`, vLLM's own `attn.k_scale`,
    ...; docs/reference/failures.md #12). Reported:
    - the legacy single `kv_scale`, which vLLM loads as `k_scale` and copies to `v_scale` with a deprecation warning
      (K and V then share one scale);
    - q/k/v projection `output_scale` under a quantization method whose config does not map it onto the attention
      (vLLM 0.33 maps it for `fp8` and `quark` only), so the KV cache never receives those scales.

    Why it matters
    Loaders expect `attn.k_scale` and remap the other spellings through a per-config mapper (vllm/model_executor/layers/quantization/base_config.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.4)).
    Unmapped KV suffixes are silently ignored (`_ignore_unexpected_suffixes`): every layer then runs its FP8 cache
    with scale 1.0, or, in older releases and other runtimes, fails with `KeyError: '...k_scale'`.

    Anti-pattern
    Serving an old AutoFP8 export with a single `kv_scale`; converting a Quark or FP8 checkpoint to ModelOpt /
    compressed-tensors naming without renaming the projection `output_scale` tensors.

    Fix
    Rename the scales to the producer's current spelling (`self_attn.k_proj.k_scale` / `v_proj.v_scale` for
    ModelOpt, `self_attn.k_scale` / `v_scale` for compressed-tensors): `ckpt fix-prefix TARGET --from OLD --to NEW`
    renames headers and the index in place; split a legacy `kv_scale` into separate K and V scales by re-exporting
    with KV calibration.
    """

    code = "CK203"
    slug = "kv-scale-naming"
    severity = "warning"
    title = "KV-cache scales in a spelling vLLM does not load as intended"

    def check(self, ctx: Context) -> Iterable[Finding]:
        method = ctx.det.vllm_quantization or ctx.det.quant_method
        by_spelling: dict[str, list[str]] = defaultdict(list)
        spellings = {}
        for name in kv_tensors(ctx):
            spelling = classify(name)
            if spelling is None:
                continue
            if spelling.status == "deprecated" or (spelling.status == "method-only" and method not in spelling.methods):
                by_spelling[spelling.id].append(name)
                spellings[spelling.id] = spelling
        for sid, names in sorted(by_spelling.items()):
            s = spellings[sid]
            if s.status == "deprecated":
                head = f"{len(names)} KV-cache scale(s) use the legacy `kv_scale` spelling ({s.writer})"
            else:
                head = (
                    f"{len(names)} KV-cache scale(s) are projection `output_scale` tensors, but this checkpoint "
                    f"resolves to `--quantization {method or 'none'}`"
                )
            yield self.finding(
                f"{head}: {s.consequence}. Rename them to the producer's k_scale / v_scale spelling.",
                tensors=names,
                files=files_of(ctx.ckpt, names),
                details={"spelling": sid, "writer": s.writer, "status": s.status, "source": s.source},
            )
