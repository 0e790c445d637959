from __future__ import annotations

from collections.abc import Iterable
from itertools import chain

from ..knowledge.hardware import Hardware
from ..knowledge.scales import global_scales
from ..model.modules import join_name
from ._experts import partially_missing
from .base import Context, Finding, Rule, module_files, register


def kernel_consequence(profiles: tuple[Hardware, ...]) -> str:
    """One sentence per GPU family: which NVFP4 path weight-only layers take there (rules/hardware.toml)."""
    by_family: dict[str, list[Hardware]] = {}
    for p in profiles:
        by_family.setdefault(p.family, []).append(p)
    parts = []
    for members in by_family.values():
        names = ", ".join(m.id for m in members)
        m = members[0]
        note = "" if m.native_fp4 else ", the same path W4A4 takes there (no FP4 tensor cores)"
        parts.append(f"{names}: {m.nvfp4_w4a16}{note}")
    return "; ".join(parts)


def missing_input_scale(module) -> str:
    """The tensor name vLLM would load the input global scale from, in the producer's own naming."""
    suffix = "input_global_scale" if "weight_global_scale" in module.tensors else "input_scale"
    return join_name(module.name, suffix)


def summarize_modules(names: list[str]) -> str:
    experts = [n for n in names if ".experts." in n]
    dense = len(names) - len(experts)
    bits = []
    if dense:
        bits.append(f"{dense} linear(s)")
    if experts:
        layers = {n.split(".experts.")[0] for n in experts}
        bits.append(f"{len(experts)} expert projection(s) in {len(layers)} MoE layer(s)")
    return " and ".join(bits)


@register
class Nvfp4WeightOnly(Rule):
    """NVFP4 weights without input global scales: vLLM runs them weight-only (W4A16), or with garbage scales.

    What it catches
    NVFP4 linears and experts (ModelOpt `weight` U8 + `weight_scale_2`, compressed-tensors `weight_packed` +
    `weight_global_scale`) that have no `input_scale` / `input_global_scale` (docs/reference/failures.md #8). The
    finding lists the missing tensor names.
    - error: the config declares NVFP4 input activations (W4A4) but the tensors lack the scales. vLLM creates the
      input-scale parameter and never loads it (no "weights not initialized" check for quantized models), so
      activations are quantized with uninitialised memory.
    - warning: the checkpoint is weight-only by design (NVFP4A16, W4A16_NVFP4, or NVFP4 with null input
      activations): it runs on the weight-only kernel, slower on Blackwell than native W4A4.

    Why it matters
    vLLM picks W4A4 vs W4A16 from the config alone (vllm/model_executor/kernels/linear/__init__.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.1)). Weight-only NVFP4 is pinned to Marlin on
    GB10/RTX 50 (and CuTe-DSL W4A16 on B200) even though the GPU has FP4 tensor cores; missing declared scales give
    NaN or garbage output.

    Anti-pattern
    Exporting NVFP4 with activation calibration disabled, deleting "unused" `input_scale` tensors, or a calibration
    run that never reached some experts.

    Fix
    Re-export with activation calibration (ModelOpt NVFP4_DEFAULT_CFG, llm-compressor scheme NVFP4) so every linear
    and expert carries an input global scale; or declare the checkpoint weight-only (NVFP4A16 / W4A16_NVFP4) if that
    is what you want.
    """

    code = "CK401"
    slug = "nvfp4-weight-only"
    severity = "error"
    title = "NVFP4 without input global scales"

    def check(self, ctx: Context) -> Iterable[Finding]:
        # Judged per row class (Detection.classes): the schemes, and so the activation modes, are the class's; only
        # the scales a broken shard or a layer-mate's finding covers are looked up per member.
        classes = [c for c in ctx.det.classes if c.declared.kind == "nvfp4" and c.disk.kind == "nvfp4"]
        if not classes:
            return
        # Experts whose layer-mates do carry input scales are moe-expert-missing-scale's (CK402), and scales held by
        # a missing or broken shard are that shard's finding: this rule covers modules and whole MoE layers without
        # input scales, so one defect is reported once.
        partial = partially_missing(ctx.ckpt) | ctx.ckpt.unavailable_tensors
        total = sum(len(c.names) for c in classes)
        # Only modules without input scales on disk are reported below, so only those are filtered.
        rows = list(chain.from_iterable(c.rows() for c in classes if c.disk.activation == "A16"))
        if partial:
            rows = [r for r in rows if not any(join_name(r.name, s) in partial for s in global_scales().input)]
        lacking = sorted(r.name for r in rows)
        if not lacking:
            return
        consequence = kernel_consequence(ctx.hardware)
        files = module_files(ctx.ckpt, lacking)
        declared_a4 = [r for r in rows if r.declared.activation == "A4" and r.disk.activation == "A16"]
        if declared_a4:
            names = sorted(r.name for r in declared_a4)
            src = ctx.det.config.source or "the config"
            native = [h.id for h in ctx.hardware if h.native_fp4]
            fallback = [h for h in ctx.hardware if not h.native_fp4]
            where = f" on {', '.join(native)}" if native and fallback else ""
            marlin = (
                f" On {', '.join(h.id for h in fallback)} (no FP4 tensor cores) vLLM falls back to "
                f"{fallback[0].nvfp4_w4a4}, which does not use input "
                f"scales."
                if fallback
                else ""
            )
            yield self.finding(
                f"{src} declares NVFP4 input activations (W4A4) but {summarize_modules(names)} of {total} NVFP4 "
                f"modules have no input global scale: vLLM builds W4A4{where}, never loads that parameter and "
                f"quantizes activations with uninitialised memory (garbage or NaN output).{marlin} Re-export with "
                f"activation calibration, or declare the checkpoint weight-only.",
                tensors=[missing_input_scale(ctx.ckpt.modules[n]) for n in names],
                files=files,
                details={
                    "declared": "W4A4",
                    "builds": "W4A4",
                    "modules_without_input_scale": len(names),
                    "nvfp4_modules": total,
                    "kernels": {h.id: h.nvfp4_w4a4 for h in ctx.hardware},
                },
            )
        by_design = [r.name for r in rows if r.declared.activation == "A16" and r.disk.activation == "A16"]
        if by_design:
            yield self.finding(
                f"{summarize_modules(by_design)} are NVFP4 weight-only by design (no input global scales): vLLM serves "
                f"them as W4A16. Kernel per GPU: {consequence}. Re-export with activation calibration for native W4A4 "
                f"on Blackwell.",
                tensors=[missing_input_scale(ctx.ckpt.modules[n]) for n in sorted(by_design)],
                files=files,
                severity="warning",
                details={
                    "declared": "W4A16",
                    "modules": len(by_design),
                    "kernels": {h.id: h.nvfp4_w4a16 for h in ctx.hardware},
                },
            )
