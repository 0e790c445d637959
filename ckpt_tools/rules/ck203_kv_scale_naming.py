from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ..knowledge.kv_scales import classify, renaming
from ..knowledge.loader import model_class
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
      (vLLM 0.23.0 to 0.33.0 map it for `fp8` and `quark` only). An error where the runtime's release raises on
      the name (vLLM 0.26.0 and later; Llama on 0.23.0), a warning where the model class drops it (Qwen3-MoE and
      Qwen3.5 on vLLM 0.23.0: the KV cache then runs with scale 1.0). rules/kv_scales.toml `[[release]]`.

    Why it matters
    Loaders expect `attn.k_scale` and remap the other spellings through a per-config mapper (vllm/model_executor/layers/quantization/base_config.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §3.4);
    docs/reference/kv-cache.md "KV-cache scale names by vLLM release"). A name no mapper renames is looked up as
    it is: the load raises, or an older model class skips it and every layer runs its FP8 cache with scale 1.0.

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
            severity = None
            if s.status == "deprecated":
                head = (
                    f"{len(names)} KV-cache scale(s) use the legacy `kv_scale` spelling ({s.writer}): {s.consequence}"
                )
            else:
                outcome, severity = self.unrenamed(ctx)
                head = (
                    f"{len(names)} KV-cache scale(s) are projection `output_scale` tensors, but this checkpoint "
                    f"resolves to `--quantization {method or 'none'}`: {s.consequence}; {outcome}"
                )
            yield self.finding(
                f"{head}. Rename them to the producer's k_scale / v_scale spelling.",
                severity=severity,
                tensors=names,
                files=files_of(ctx.ckpt, names),
                details={"spelling": sid, "writer": s.writer, "status": s.status, "source": s.source},
            )

    @staticmethod
    def unrenamed(ctx: Context) -> tuple[str, str | None]:
        """What the runtime's vLLM release does with a name it does not rename: the model class drops it (a
        warning: the KV cache keeps scale 1.0), or the load raises (an error)."""
        version = ctx.det.runtime.vllm_version
        archs = (ctx.ckpt.config or {}).get("architectures")
        mc = model_class(archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None)
        if renaming(version).drops(mc.id):
            return f"vLLM {version}'s {mc.inner_class} drops them, so the KV cache runs with scale 1.0", None
        return f"vLLM {version}'s load raises on them", "error"
