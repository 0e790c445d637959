from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from ._speculative import dflash_config
from .base import ServeCheck, ServeContext, register


@register
class DflashKvCacheDtype(ServeCheck):
    """A KV-cache dtype no DFlash-capable attention backend of the runtime supports.

    What it catches
    --kv-cache-dtype outside the runtime's DFlash KV-cache dtypes (rules/runtimes/*.toml
    [speculative.dflash] `kv_cache_dtypes`, default auto) with a DFlash drafter: no non-causal attention backend of
    that runtime supports it.

    Why it matters
    vLLM raises 'No valid attention backend found ... use_non_causal=True', or drafter acceptance collapses toward
    0%.

    Anti-pattern
    --kv-cache-dtype fp8 with a DFlash drafter on the v0.23.0 image.

    Fix
    Drop --kv-cache-dtype (BF16 KV) or use the runtime's supported pairing.

    Source
    the AEON-7 Qwen3.6-35B-A3B NVFP4 model card (DO NOT UNDO 6); the AEON vLLM-Ultimate DGX Spark image README
    (Known issues; Recipe A)
    """

    code = "CS150"
    slug = "dflash-kv-cache-dtype"
    severity = "error"
    title = "KV-cache dtype DFlash cannot use on this runtime"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        found = dflash_config(ctx)
        if found is None:
            return
        _spec, rules = found
        kv = ctx.value("--kv-cache-dtype")
        if kv is not None and kv not in rules.kv_cache_dtypes:
            yield self.finding(
                f"--kv-cache-dtype {kv} with a DFlash drafter on {ctx.rt.name}: no "
                f"non-causal attention backend supports it ({rules.source})",
                fix="remove --kv-cache-dtype",
            )
