"""The three checks of the conformance run, each comparing ckpt's statement with vLLM's own answer for one case.

`check_method`: ckpt's `vllm_quantization` / rejection against vLLM's resolved method or error (config stage, or a
quant-config error raised while building the layers). `check_modules`: ckpt's per-module scheme table against the
quant config's decision for the vLLM layer that serves each module. `check_serve`: every argv `ckpt serve-flags`
emits for the upstream runtime (each hardware profile) through vLLM's own `vllm serve` parser and ModelConfig.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import vllm_side as vs

from ckpt_tools.errors import CkptError
from ckpt_tools.pipeline import analyze

UPSTREAM_RUNTIME = "vllm-0.33"


@dataclass
class Cell:
    """One check on one case: agree / disagree / n/a, a short text for the table, and the details behind it."""

    status: str  # "ok", "DIFF", "n/a"
    text: str
    details: list[str] = field(default_factory=list)


# ---- ckpt's side --------------------------------------------------------------------------------------------------


def ckpt_view(folder: Path):
    try:
        return analyze(str(folder), headers_only=True)
    except CkptError as exc:
        return str(exc)


def ckpt_refusal(result, layer: str | None = None) -> str | None:
    """ckpt's statement that vLLM refuses the checkpoint: the detection's rejection, an unreadable config (CK104
    invalid-config), a missing config.json or an architecture vLLM has no class for (CK312 errors), a target ckpt
    cannot open at all, or, when vLLM raised while building `layer`, an error finding that names that layer."""
    if isinstance(result, str):
        return result
    if result.detection.rejection:
        return result.detection.rejection
    for f in result.report.findings:
        if f.code == "CK104" and (f.details or {}).get("kind") == "invalid-config":
            return f.message
        # CK312 at error: no config.json, or an architecture neither vLLM nor transformers provides.
        if f.code == "CK312" and f.severity == "error" and "fallback_class" not in (f.details or {}):
            return f.message
    if layer is not None:
        finding = naming_error(result, layer)
        if finding is not None:
            return f"{finding.code}: {finding.message}"
    return None


def _layer_keys(prefix: str) -> tuple[str, ...]:
    """Ways a finding can name a vLLM layer: its full vLLM prefix, or the part from `layers.` on (HF and vLLM
    prefixes differ before it, e.g. `model.language_model.` vs `language_model.model.`)."""
    keys = [prefix]
    if "layers." in prefix:
        keys.append(prefix[prefix.index("layers.") :])
    return tuple(keys)


def naming_error(result, prefix: str):
    """An error finding whose message or tensors name the vLLM layer `prefix`."""
    keys = _layer_keys(prefix)
    for f in result.report.findings:
        if f.severity == "error" and any(k in f.message or any(k in t for t in f.tensors) for k in keys):
            return f
    return None


def _core(message: str) -> str:
    """The part of an error message both sides should share: no exception class, the first 60 characters."""
    text = message.split(": ", 1)[1] if message.split(": ", 1)[0].endswith(("Error", "Exception")) else message
    return " ".join(text.split())[:60]


# ---- check 1: method ----------------------------------------------------------------------------------------------


def layer_error(build: vs.ModelBuild | None) -> vs.LayerDecision | None:
    """The first layer whose quant-config dispatch raised (vLLM stops building the model there)."""
    if build is None:
        return None
    return next((d for d in build.decisions.values() if d.kind == "error"), None)


def vllm_refusal(verdict: vs.Verdict, build: vs.ModelBuild | None) -> str | None:
    if verdict.error:
        return verdict.error
    bad = layer_error(build)
    return f"layer {bad.prefix}: {bad.detail}" if bad is not None else None


def check_method(verdict: vs.Verdict, build: vs.ModelBuild | None, result) -> tuple[Cell, str, str]:
    v_ref = vllm_refusal(verdict, build)
    bad_layer = layer_error(build)
    c_ref = ckpt_refusal(result, bad_layer.prefix if bad_layer is not None else None)
    v_text = f"error: {v_ref}" if v_ref else (verdict.method or "unquantized")
    c_method = None if isinstance(result, str) else result.detection.vllm_quantization
    c_text = f"error: {c_ref}" if c_ref else (c_method or "unquantized")
    details = [f"vLLM: {v_text}", f"ckpt: {c_text}"]
    if v_ref and c_ref:
        same = _core(v_ref) in " ".join(c_ref.split())
        return (
            Cell("ok", "both refuse" + ("" if same else " (message differs)"), details),
            _short(v_text),
            _short(c_text),
        )
    if not v_ref and not c_ref and verdict.method == c_method:
        return Cell("ok", verdict.method or "unquantized"), _short(v_text), _short(c_text)
    return Cell("DIFF", f"{_short(c_text)} != {_short(v_text)}", details), _short(v_text), _short(c_text)


def _short(text: str, n: int = 28) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ---- check 2: modules ---------------------------------------------------------------------------------------------


def ckpt_label(scheme) -> str:
    if scheme.kind == "unknown":
        return "error"
    if not scheme.quantized:
        return "unquantized"
    return f"{scheme.kind} {scheme.activation}"


def vllm_label(build: vs.ModelBuild, prefix: str | None) -> str:
    if prefix is None:
        return "absent"
    d = build.decisions.get(prefix)
    if d is None:
        return "unquantized"  # built without the quant config: the layer is never offered to it
    if d.kind == "error":
        return "error"
    return "unquantized" if d.kind == "unquantized" else f"{d.kind} {d.activation}"


def check_modules(verdict: vs.Verdict, build: vs.ModelBuild | None, result) -> Cell:
    if isinstance(result, str):
        return Cell("n/a", "ckpt refused target")
    if verdict.error:
        return Cell("n/a", "vLLM refuses config")
    if build is None or verdict.method is None:
        rows = [r for r in result.detection.rows if r.declared.quantized]
        if rows:
            return Cell(
                "DIFF",
                f"{len(rows)} quantized",
                [f"{r.name}: ckpt {ckpt_label(r.declared)}, vLLM unquantized" for r in rows],
            )
        return Cell("n/a", "unquantized")
    if build.error and not build.decisions:
        return Cell("n/a", "model not built", [build.error])
    rows = result.detection.rows
    bad, flagged, dropped = [], set(), []
    for r in rows:
        prefix = vs.vllm_prefix(build, r.name)
        if prefix == vs.DROPPED:
            dropped.append(r.name)  # vLLM never loads these weights: it has no opinion on their scheme
            continue
        want, got = vllm_label(build, prefix), ckpt_label(r.declared)
        if want == "absent" and (code := _flagged(result, r.name)):
            flagged.add(code)  # vLLM has no such layer and ckpt reports these tensors: both say they do not load
            continue
        if want == "error" and got != "error" and (finding := naming_error(result, prefix)) is not None:
            flagged.add(finding.code)  # vLLM raises on this layer and ckpt reports that error for it
            continue
        if want != got:
            bad.append(f"{r.name} -> {prefix or '(no vLLM layer)'}: ckpt {got}, vLLM {want}")
    if build.error:
        bad.append(f"model build stopped: {build.error}")
    judged = len(rows) - len(dropped)
    agree = judged - sum(1 for b in bad if not b.startswith("model build"))
    note = f" (refused or unplaced layers flagged by {', '.join(sorted(flagged))})" if flagged else ""
    if dropped:
        note += f" ({len(dropped)} not loaded by vLLM: {dropped[0]}{', …' if len(dropped) > 1 else ''})"
    return Cell("ok" if not bad else "DIFF", f"{agree}/{judged}{note}", bad)


def _flagged(result, module: str) -> str | None:
    """Why ckpt expects no vLLM layer for `module`: its family drops the prefix (loaded by the MTP drafter), or a
    warning or error finding covers it. Findings list a sample of tensors, so a finding covers the module when it
    names one of its tensors, a rename plan moves its prefix (CK201), or it names a tensor under the same two-segment
    root (`model.visual.`, `mtp.layers.`), the unit the naming rules judge."""
    det = result.detection
    if any(module.startswith(p) for p in det.family.dropped_prefixes):
        return f"family {det.family.id} drops {module.split('.', 1)[0]}."
    root = ".".join(module.split(".")[:2]) + "."
    for f in result.report.findings:
        if f.severity not in ("error", "warning"):
            continue
        renames = (f.details or {}).get("rename") or []
        if any(t.startswith((module + ".", root)) for t in f.tensors) or any(
            isinstance(p, dict) and module.startswith(str(p.get("from"))) for p in renames
        ):
            return f.code
    return None


# ---- check 3: serve -----------------------------------------------------------------------------------------------


def serve_argvs(folder: Path) -> tuple[dict[tuple[str, ...], tuple[str, dict[str, str]]], list[str]]:
    """Every distinct argv `ckpt serve-flags` emits for the upstream runtime, with no hardware profile and with each
    one: argv -> (the first hardware it came from, env). Also the hardware labels whose plan ckpt blocks."""
    from ckpt_tools.knowledge.hardware import profiles as hardware_profiles
    from ckpt_tools.serve import serve_flags

    argvs: dict[tuple[str, ...], tuple[str, dict[str, str]]] = {}
    blocked: list[str] = []
    for hw in [None, *(h.id for h in hardware_profiles())]:
        plan = serve_flags(str(folder), runtime=UPSTREAM_RUNTIME, hardware=hw)
        label = hw or "no hardware"
        if plan.blocked:
            blocked.append(label)
            continue
        argvs.setdefault(tuple(plan.argv), (label, dict(plan.env)))
    return argvs, blocked


def check_serve(folder: Path, verdict: vs.Verdict, build: vs.ModelBuild | None) -> Cell:
    try:
        argvs, blocked = serve_argvs(folder)
    except CkptError as exc:
        return Cell("n/a", "ckpt refused target", [str(exc)])
    v_ref = vllm_refusal(verdict, build)
    if not argvs:
        if v_ref:
            return Cell("n/a", "ckpt blocks; vLLM refuses")
        return Cell("DIFF", "ckpt blocks, vLLM accepts", [f"vLLM resolves {verdict.method or 'unquantized'}"])
    bad = []
    for argv, (hw, env) in argvs.items():
        sv = vs.parse_serve(list(argv), env)
        if sv.error:
            bad.append(f"[{hw}] {' '.join(argv[3:])}: vLLM {sv.stage}: {sv.error}")
        elif not verdict.error and sv.quantization != verdict.method:
            bad.append(f"[{hw}] {' '.join(argv[3:])}: resolves {sv.quantization}, not {verdict.method}")
    if blocked and not v_ref:
        bad.append(f"ckpt blocks for {', '.join(blocked)} though vLLM accepts")
    n = len(argvs)
    return Cell("ok" if not bad else "DIFF", f"{n - len([b for b in bad if b.startswith('[')])}/{n} argv", bad)
