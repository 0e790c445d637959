from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..knowledge.transformers import transformers_classes
from .base import Context, Finding, Rule, register


@register
class UnsupportedArchitecture(Rule):
    """config.json names no architecture, or one the runtime has no model class for.

    What it catches
    - no config.json: vLLM cannot build a model config;
    - a config.json without `architectures`: vLLM falls back to transformers' base class for the `model_type`
      (`LlamaModel` for `llama`: no LM head, so embeddings/pooling instead of generation), or stops with "No model
      architectures are specified" when transformers has none (rules/transformers.toml);
    - an `architectures[0]` that is not in the runtime's model registry (the profile's `[architectures]` table,
      generated from the release's `vllm/model_executor/models/registry.py`), including architectures the release
      dropped: an error when neither transformers nor the repo's `auto_map` provides the class (vLLM refuses), a
      warning when only the Transformers modeling backend can serve it.

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
        ckpt = ctx.ckpt
        if ckpt.config is None:
            if "config.json" not in ckpt.files:
                yield self.finding(
                    "There is no config.json: vLLM cannot build the model config and refuses to start. Add the "
                    "config.json the model was exported with.",
                    count=1,
                )
            return  # an unreadable config.json is reported by invalid-header
        if ckpt.architecture is None:
            yield from self._no_architectures(ctx)
            return
        yield from self._unknown_architecture(ctx, ckpt.architecture)

    def _no_architectures(self, ctx: Context) -> Iterable[Finding]:
        tf = transformers_classes()
        model_type = ctx.ckpt.model_type
        base = tf.base_model.get(model_type or "")
        causal = tf.causal_lm.get(model_type or "")
        hint = f'"architectures": ["{causal}"]' if causal else '"architectures": ["<the model class>"]'
        if base is None:
            message = (
                f"config.json has no `architectures`, and transformers {tf.version} has no base class for "
                f"model_type {model_type!r}: vLLM stops with \"No model architectures are specified\". Add "
                f"{hint}."
            )
        else:
            message = (
                f"config.json has no `architectures`: vLLM falls back to transformers' base class for "
                f"model_type {model_type!r}, `{base}`, which has no LM head (embeddings or pooling, not "
                f"generation). Add {hint}, or serve with --hf-overrides '{{{hint}}}'."
            )
        yield self.finding(
            message,
            files=["config.json"],
            count=1,
            details={"model_type": model_type, "fallback_class": base, "suggested": causal},
        )

    def _unknown_architecture(self, ctx: Context, arch: str) -> Iterable[Finding]:
        rt = ctx.det.runtime
        supported = rt.architectures
        if supported is None or arch in supported:
            return
        tf = transformers_classes()
        until = rt.previously_supported.get(arch)
        custom = bool((ctx.ckpt.config or {}).get("auto_map"))
        why = (
            f"{rt.name} dropped `{arch}` (served natively until vLLM v{until})"
            if until
            else f"{rt.name} has no model class for `{arch}`"
        )
        details: dict[str, Any] = {
            "architecture": arch,
            "runtime": rt.id,
            "last_supported": until,
            "auto_map": custom,
            "in_transformers": arch in tf.classes,
        }
        missing_code = _missing_auto_map_files(ctx.ckpt) if custom and arch not in tf.classes else []
        if missing_code:
            details["missing_files"] = missing_code
            yield self.finding(
                f"{why}, and the config's auto_map names remote code that is not in the checkpoint "
                f"({', '.join(missing_code)}): vLLM cannot import the model class and refuses the checkpoint. Add "
                f"the modeling file(s), or set `architectures` to a class vLLM lists.",
                files=["config.json"],
                count=1,
                details=details,
            )
            return
        if arch in tf.classes or custom:
            source = (
                "the repo's auto_map code (--trust-remote-code)"
                if custom and arch not in tf.classes
                else (f"transformers' own `{arch}`")
            )
            yield self.finding(
                f"{why}: it runs only through the Transformers modeling backend with {source}, without vLLM's "
                f"fused kernels, and only if vLLM finds that class backend-compatible (otherwise it refuses the "
                f"checkpoint). Use a runtime with native support.",
                files=["config.json"],
                count=1,
                severity="warning",
                details=details,
            )
            return
        refusal = (
            f"Model architecture {arch} was supported in vLLM until v{until}, and is not supported anymore"
            if until
            else f"Model architectures ['{arch}'] are not supported for now"
        )
        yield self.finding(
            f"{why}, and neither transformers {tf.version} nor an auto_map provides it: vLLM refuses the checkpoint "
            f"(\"{refusal}\"). Set `architectures` to the class vLLM lists for this model family, or use a runtime "
            f"that supports it (--runtime).",
            files=["config.json"],
            count=1,
            details=details,
        )


def _missing_auto_map_files(ckpt) -> list[str]:
    """Local modeling files the auto_map's AutoModel entries import that the checkpoint lacks. Entries of the form
    `org/repo--module.Class` live in another repo and are not checked."""
    auto_map = (ckpt.config or {}).get("auto_map")
    if not isinstance(auto_map, dict):
        return []
    missing = []
    for key, ref in auto_map.items():
        refs = ref if isinstance(ref, list) else [ref]
        for item in refs:
            if not key.startswith("AutoModel") or not isinstance(item, str) or "--" in item or "." not in item:
                continue
            module_file = item.rsplit(".", 1)[0].replace(".", "/") + ".py"
            if module_file not in ckpt.files and module_file not in missing:
                missing.append(module_file)
    return missing
