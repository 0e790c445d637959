"""What serving needs to know about a checkpoint, read from one `Analysis`: the context length vLLM derives, whether
a vision tower is present and loadable, the NVFP4 activation mode, and (for a drafter) its speculative method."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..knowledge.runtimes import Runtime
from ..knowledge.serving import serving
from ..model.checkpoint import Checkpoint
from ..pipeline import Analysis
from ..plan.context import derived_max_model_len
from ..rules.ck201_misnested_prefix import MisnestedPrefix


@dataclass(frozen=True)
class CheckpointFacts:
    target: str
    architecture: str | None
    model_type: str | None
    producer: str
    quant_algo: str | None
    vllm_quantization: str | None
    rejection: str | None
    activation_mode: str | None  # W4A4 / W4A16 / mixed for NVFP4
    kv_cache: str | None
    max_model_len: int | None
    max_len_key: str | None
    has_vision: bool
    vision_loadable: bool
    has_mtp: bool
    moe: bool

    @property
    def weight_only_nvfp4(self) -> bool:
        return self.activation_mode in ("W4A16", "mixed")


def config_refusal(ckpt: Checkpoint) -> str | None:
    """vLLM builds no ModelConfig without a readable config.json, whatever the flags (`vllm serve` stops in
    `get_config`; found by bench/conformance against vLLM 0.33.0)."""
    if "config.json" not in ckpt.files:
        return "there is no config.json, so vLLM cannot build the model config"
    problem = next((p for p in ckpt.problems if p.file == "config.json" and p.kind == "invalid-config"), None)
    if problem is not None:
        return f"config.json cannot be read ({problem.message}), so vLLM cannot build the model config"
    return None


def checkpoint_facts(analysis: Analysis) -> CheckpointFacts:
    ckpt, det, report = analysis.checkpoint, analysis.detection, analysis.report
    misnested = [f for f in report.findings if f.slug == MisnestedPrefix.slug]
    # Per class when detection made them (each shares its members' component, and the classes hold every row).
    vision_tensors = any(c.component == "vision" for c in det.classes or det.rows) or "vision" in det.components
    vision_bad = any(
        any(
            step.get("to", "").startswith(prefix)
            for step in f.details.get("rename", ())
            for prefix in ("model.visual", "visual")
        )
        or any("visual" in t or "vision" in t for t in f.tensors)
        for f in misnested
    )
    max_len, key = derived_max_model_len(ckpt.text_config)
    return CheckpointFacts(
        target=analysis.report.target,
        architecture=ckpt.architecture,
        model_type=ckpt.model_type,
        producer=det.producer,
        quant_algo=det.quant_algo,
        vllm_quantization=det.vllm_quantization,
        rejection=det.rejection or config_refusal(ckpt),
        activation_mode=det.activation_mode,
        kv_cache=det.kv_cache,
        max_model_len=max_len,
        max_len_key=key,
        has_vision=vision_tensors,
        vision_loadable=vision_tensors and not vision_bad,
        has_mtp="mtp" in det.components,
        moe=bool(ckpt.experts) or any(".experts." in r.name for r in det.rows),
    )


def drafter_method(analysis: Analysis, rt: Runtime) -> str | None:
    """The speculative method of a drafter checkpoint (rules/serving.toml [[drafter]]), or None if unknown."""
    cfg = analysis.checkpoint.config or {}
    archs = [a for a in cfg.get("architectures") or [] if isinstance(a, str)]
    name = os.path.basename(os.path.normpath(analysis.report.target)).lower()
    for kind in serving().drafters:
        if any(k in cfg for k in kind.config_keys):
            return kind.method
        if any(part in a for part in kind.architectures_contain for a in archs):
            return kind.method
        if any(part in name for part in kind.name_contains):
            return kind.method
        table = kind.model_types_in_choices
        if table and cfg.get("model_type") in rt.choices(table):
            return kind.method
    return None
