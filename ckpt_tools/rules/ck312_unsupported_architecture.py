from __future__ import annotations

from typing import Iterable

from .base import Context, Finding, Rule, register


@register
class UnsupportedArchitecture(Rule):
    """config.json names no architecture, or one the runtime has no model class for.

    What it catches
    - no config.json, or one without a non-empty `architectures` list: vLLM stops with "No model architectures are
      specified" before it reads a tensor;
    - an `architectures[0]` that is not in the runtime's model registry (the profile's `[architectures]` table,
      generated from the release's `vllm/model_executor/models/registry.py`), including architectures the release
      dropped (`_PREVIOUSLY_SUPPORTED_MODELS`).

    Why it matters
    vLLM resolves the model class from `architectures` (`ModelRegistry.inspect_model_cls`). An architecture it has no
    class for only runs through the Transformers modeling backend, which works only when transformers itself (or the
    repo's `auto_map` code) provides the class, and then without vLLM's fused kernels; otherwise vLLM refuses with
    "Model architectures [...] are not supported for now" or "was supported in vLLM until vX".

    Anti-pattern
    Renaming `architectures` by hand, exporting a model with a training-framework class name, or serving a model
    family on a runtime older (or newer) than the one that supports it.

    Fix
    Set `architectures` to the class vLLM lists for the model family, serve with a runtime that supports it
    (`--runtime`), or pass `--model-impl transformers` knowingly.
    """

    code = "CK312"
    slug = "unsupported-architecture"
    severity = "error"
    title = "Architecture the runtime has no model class for"

    def check(self, ctx: Context) -> Iterable[Finding]:
        ckpt, rt = ctx.ckpt, ctx.det.runtime
        if ckpt.config is None:
            if "config.json" not in ckpt.files:
                yield self.finding(
                    "There is no config.json: vLLM cannot build the model config and refuses to start. Add the "
                    "config.json the model was exported with.",
                    count=1,
                )
            return  # an unreadable config.json is reported by invalid-header
        arch = ckpt.architecture
        if arch is None:
            yield self.finding(
                "config.json has no `architectures` list: vLLM stops with \"No model architectures are specified\". "
                "Add the model class, e.g. \"architectures\": [\"LlamaForCausalLM\"].",
                files=["config.json"],
                count=1,
            )
            return
        supported = rt.architectures
        if supported is None or arch in supported:
            return
        until = rt.previously_supported.get(arch)
        custom = bool((ckpt.config or {}).get("auto_map"))
        if until:
            why = f"{rt.name} dropped `{arch}`; it was served natively until vLLM v{until}"
        else:
            why = f"{rt.name} has no model class for `{arch}`"
        fallback = (
            "vLLM falls back to the Transformers modeling backend with the repo's auto_map code "
            "(--trust-remote-code), without vLLM's fused kernels"
            if custom
            else "vLLM serves it only if transformers itself has that class (Transformers modeling backend, without "
            "vLLM's fused kernels); otherwise it refuses the checkpoint"
        )
        yield self.finding(
            f"{why}: {fallback}. Use the architecture vLLM lists for this model family or a runtime that supports it.",
            files=["config.json"],
            count=1,
            severity="warning",
            details={"architecture": arch, "runtime": rt.id, "last_supported": until, "auto_map": custom},
        )
