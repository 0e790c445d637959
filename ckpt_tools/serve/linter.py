"""Lint an existing serve command against the checkpoint and the runtime / hardware profiles. Each conflict is a
`Finding` with a CS1xx code and slug from rules/serve-checks.toml, a message, and the corrected flag as `fix`."""

from __future__ import annotations

import difflib
import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..detect.formats import format_for
from ..knowledge.hardware import Hardware
from ..knowledge.runtimes import Runtime, default_runtime_id
from ..knowledge.serve_checks import check
from ..knowledge.serving import serving
from ..rules.base import Finding
from .facts import CheckpointFacts
from .parser import ParsedCommand, ParsedFlag
from .planner import ServePlan

HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT])$")
W4A4_ONLY_LINEAR = ("cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cudnn", "fbgemm")
A16_MOE_OK = (
    "auto",
    "marlin",
    "humming",
    "b12x",
    "flashinfer_b12x",
    "emulation",
)  # vllm/model_executor/layers/fused_moe/oracle/nvfp4.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §4.2)


def _f(slug: str, message: str, fix: str | None = None, severity: str | None = None, **details: Any) -> Finding:
    c = check(slug)
    return Finding(
        code=c.code, slug=c.slug, severity=severity or c.severity, message=message, count=1, fix=fix, details=details
    )


def flag_text(flag: str, value: str | None) -> str:
    return shlex.join([flag] + ([value] if value is not None else []))


def parse_int(text: str, kind: str) -> int:
    text = text.strip()
    if kind == "human_int_or_auto" and (text == "-1" or text.lower() == "auto"):
        return -1
    m = HUMAN_INT.fullmatch(text) if kind.startswith("human") else None
    if m:
        number, suffix = m.groups()
        mult = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}.get(suffix) or 2 ** (10 * "KMGT".index(suffix) + 10)
        return int(float(number) * mult)
    return int(text)


@dataclass
class _Ctx:
    cmd: ParsedCommand
    rt: Runtime
    hw: Hardware | None
    facts: CheckpointFacts
    plan: ServePlan

    def value(self, name: str) -> str | None:
        f = self.cmd.last(name)
        return f.value if f is not None else None

    def planned(self, name: str) -> str | None:
        for f in self.plan.flags:
            if f.flag == name:
                return flag_text(f.flag, f.value)
        return None


def lint(
    cmd: ParsedCommand, rt: Runtime, hw: Hardware | None, facts: CheckpointFacts, plan: ServePlan
) -> tuple[Finding, ...]:
    ctx = _Ctx(cmd, rt, hw, facts, plan)
    out: list[Finding] = []
    for fn in (
        _flags,
        _env,
        _quantization,
        _context,
        _vision,
        _parsers,
        _backends,
        _speculative,
        _mamba,
        _limits,
        _image,
    ):
        out.extend(fn(ctx))
    return tuple(out)


# ---- the CLI table -------------------------------------------------------------------------------------------------


def _flags(ctx: _Ctx) -> Iterable[Finding]:
    seen: dict[str, ParsedFlag] = {}
    for f in ctx.cmd.flags:
        if not f.known:
            close = difflib.get_close_matches(f.name, list(ctx.rt.flags), n=1, cutoff=0.9)
            hint = f"; did you mean {close[0]}?" if close else ""
            yield _f(
                "unknown-flag",
                f"{f.spelled} is not an option of {ctx.rt.name}'s `vllm serve`{hint}",
                fix=f"remove {f.spelled}" if not close else flag_text(close[0], f.value),
                flag=f.spelled,
            )
            continue
        if f.name in seen and not f.json_path and f.name != "--optimization-level":
            yield _f(
                "duplicate-flag",
                f"{f.name} is given twice ({seen[f.name].spelled}, {f.spelled}); the last value wins",
                fix=flag_text(f.name, f.value),
                flag=f.name,
            )
        seen.setdefault(f.name, f)
        problem = _value_problem(ctx, f)
        if problem:
            message, fix = problem
            yield _f("invalid-flag-value", message, fix=fix, flag=f.name)


def _value_problem(ctx: _Ctx, f: ParsedFlag) -> tuple[str, str | None] | None:
    info = ctx.rt.flags[f.name]
    if f.json_path:
        return None
    if info.arity == "value" and f.value is None:
        return f"{f.spelled} needs a value", ctx.planned(f.name)
    if info.arity in ("boolean", "switch") and f.value is not None and "=" in f.spelled:
        return f"{f.spelled} takes no value", f.name
    if f.value is None:
        return None
    kind = info.type
    if info.choices is not None:
        value = info.normalize(f.value)
        if value not in info.choices:
            better = _choice_fix(ctx, f.name) or difflib.get_close_matches(value, info.choices, n=1)
            fix = better if isinstance(better, str) else (flag_text(f.name, better[0]) if better else None)
            extra = (
                " (qwen3 is a reasoning parser, not a tool parser)"
                if (f.name == "--tool-call-parser" and value == "qwen3")
                else ""
            )
            return f"{f.name} {f.value!r} is not accepted by {ctx.rt.name}{extra}", fix
        return None
    try:
        if kind in ("int", "human_int", "human_int_or_auto"):
            number: float = parse_int(f.value, kind)
        elif kind == "float":
            number = float(f.value)
        elif kind == "json":
            json.loads(f.value)
            return None
        else:
            return None
    except (ValueError, json.JSONDecodeError) as exc:
        return f"{f.name} {f.value!r} is not a valid {kind} ({exc})", ctx.planned(f.name)
    spec = info.spec
    if (spec.gt is not None and not number > spec.gt) or (spec.le is not None and not number <= spec.le):
        return f"{f.name} {f.value} is out of range", ctx.planned(f.name)
    return None


def _choice_fix(ctx: _Ctx, name: str) -> str | None:
    fam = serving().family(ctx.facts.architecture, ctx.facts.model_type)
    wanted = None
    if fam is not None:
        wanted = {"--tool-call-parser": fam.tool_call_parser, "--reasoning-parser": fam.reasoning_parser}.get(name)
    if wanted:
        return flag_text(name, wanted)
    return ctx.planned(name)


# ---- environment ---------------------------------------------------------------------------------------------------


def _env(ctx: _Ctx) -> Iterable[Finding]:
    removed = ctx.rt.env.removed
    traps = list(ctx.rt.env.traps) + list(ctx.hw.env_traps if ctx.hw else ())
    for name, value in ctx.cmd.env.items():
        if name in removed:
            entry = removed[name]
            yield _f(
                "removed-env-var",
                f"{name} was removed: {ctx.rt.name} ignores it ({entry.source})",
                fix=f"remove {name}; use {entry.replacement}",
                variable=name,
            )
            continue
        hit = next((t for t in traps if t.name == name and (t.value is None or t.value == value)), None)
        if hit:
            yield _f(
                "env-trap",
                f"{name}={value}: {hit.message} ({hit.source})",
                fix=hit.fix,
                severity=hit.severity,
                variable=name,
            )
        elif name.startswith("VLLM_") and ctx.rt.env.known and name not in ctx.rt.env.known:
            yield _f(
                "unknown-env-var",
                f"{name} is not an environment variable of {ctx.rt.name}: vLLM logs 'Unknown "
                f"vLLM environment variable detected' and ignores it",
                fix=f"remove {name}",
                variable=name,
            )


# ---- checkpoint against flags ------------------------------------------------------------------------------------


def _quantization(ctx: _Ctx) -> Iterable[Finding]:
    facts = ctx.facts
    if facts.rejection:
        alt = ", ".join(ctx.plan.alternatives)
        yield _f(
            "checkpoint-rejected",
            f"{ctx.rt.name} refuses this checkpoint: {facts.rejection}",
            fix=f"--runtime {ctx.plan.alternatives[0]}" if ctx.plan.alternatives else None,
            alternatives=alt,
        )
    user = ctx.value("--quantization")
    if user is None or facts.rejection:
        return
    resolved = facts.vllm_quantization
    planned = ctx.planned("--quantization") or "(omit --quantization)"
    if resolved is None:
        yield _f(
            "quantization-mismatch",
            f"--quantization {user} on a checkpoint that is not quantized: vLLM quantizes nothing from it or fails",
            fix="remove --quantization",
        )
        return
    if user == resolved:
        return
    fmt = format_for(facts.producer)
    if fmt is not None and user in fmt.override_from:
        return  # the config class's override accepts it and resolves `resolved` (rules/formats.toml)
    if fmt is not None and fmt.id == "auto-round":
        # INCConfig.override_quantization_method ignores the user's value: it becomes inc without an error.
        yield _f(
            "quantization-mismatch",
            f"--quantization {user}: vLLM silently replaces it with {resolved} for "
            f"this AutoRound checkpoint; the flag misstates what runs",
            fix=planned,
            severity="warning",
        )
        return
    if (facts.producer == "modelopt" and user.startswith("modelopt")) or (
        facts.producer == "modelopt" and user == "compressed-tensors" and resolved == "modelopt_fp4"
    ):
        # The ModelOpt overrides replace the user's value without an error (vllm/config/model.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.5)) except for the
        # FP8_PB_WO / FP8_PER_CHANNEL_PER_TOKEN + modelopt_fp4 combination.
        silent = not (resolved == "modelopt" and user == "modelopt_fp4" and facts.quant_algo != "FP8")
        if silent:
            yield _f(
                "quantization-mismatch",
                f"--quantization {user}: vLLM silently replaces it with {resolved} for "
                f"this {facts.quant_algo} checkpoint; the flag misstates what runs",
                fix=planned,
                severity="warning",
            )
            return
    yield _f(
        "quantization-mismatch",
        f"--quantization {user} does not match the checkpoint: vLLM raises 'Quantization method specified in "
        f"the model config ({resolved}) does not match the quantization method specified in the `quantization` "
        f"argument ({user})'",
        fix=planned,
    )


def _context(ctx: _Ctx) -> Iterable[Finding]:
    f = ctx.cmd.last("--max-model-len")
    derived = ctx.facts.max_model_len
    if f is None or f.value is None or derived is None:
        return
    try:
        asked = parse_int(f.value, "human_int_or_auto")
    except ValueError:
        return
    if asked > derived:
        env = ctx.rt.behaviour.long_max_model_len_env
        allowed = env and ctx.cmd.env.get(env) not in (None, "", "0")
        yield _f(
            "max-model-len-exceeded",
            f"--max-model-len {f.value} exceeds the checkpoint's {ctx.facts.max_len_key}={derived}"
            + (
                f"; {env} lets it start, but RoPE positions past {derived} may give NaN"
                if allowed
                else f": vLLM raises 'User-specified max_model_len ({asked}) is greater than the derived max_model_len'"
            ),
            fix=flag_text("--max-model-len", str(derived)),
            severity="warning" if allowed else None,
        )


def _vision(ctx: _Ctx) -> Iterable[Finding]:
    facts = ctx.facts
    f = ctx.cmd.last("--limit-mm-per-prompt")
    limits = None
    if f is not None and f.value is not None:
        try:
            limits = ctx.cmd.json_value("--limit-mm-per-prompt")
        except json.JSONDecodeError:
            return
        modalities = ctx.rt.flags["--limit-mm-per-prompt"].spec.modalities
        bad = [k for k in (limits or {}) if k not in modalities] if isinstance(limits, dict) else ["(not an object)"]
        if bad:
            yield _f(
                "invalid-flag-value",
                f"--limit-mm-per-prompt has unknown modalities {bad}; vLLM knows {list(modalities)}",
                fix=ctx.planned("--limit-mm-per-prompt"),
                flag="--limit-mm-per-prompt",
            )
            return
    nonzero = isinstance(limits, dict) and any(_count(v) for v in limits.values())
    if limits is not None and nonzero and not facts.vision_loadable:
        why = (
            "its vision tower sits under a prefix vLLM does not load (misnested-prefix)"
            if facts.has_vision
            else "the checkpoint has no vision tower"
        )
        fix = "ckpt fix-prefix " + shlex.quote(facts.target) if facts.has_vision else "remove --limit-mm-per-prompt"
        yield _f("mm-limit-without-vision", f"--limit-mm-per-prompt asks for images/video but {why}", fix=fix)
    off = ctx.cmd.last("--language-model-only")
    disabled = (off is not None and not off.negated) or (limits is not None and not nonzero)
    if facts.vision_loadable and disabled:
        yield _f(
            "vision-disabled",
            "the checkpoint's vision tower loads, but this command switches image/video input off",
            fix=ctx.planned("--limit-mm-per-prompt") or "remove the flag",
        )


def _count(v: Any) -> int:
    if isinstance(v, dict):
        v = v.get("count", 0)
    return v if isinstance(v, int) else 0


def _parsers(ctx: _Ctx) -> Iterable[Finding]:
    fam = serving().family(ctx.facts.architecture, ctx.facts.model_type)
    tool = ctx.value("--tool-call-parser")
    auto = ctx.cmd.last("--enable-auto-tool-choice")
    if auto is not None and not auto.negated and tool is None and ctx.rt.behaviour.auto_tool_choice_requires_parser:
        yield _f(
            "auto-tool-choice-without-parser",
            "--enable-auto-tool-choice without --tool-call-parser: vLLM "
            "raises 'Error: --enable-auto-tool-choice requires --tool-call-parser'",
            fix=ctx.planned("--tool-call-parser"),
        )
    if fam is None:
        return
    for name, wanted, ok in (
        ("--tool-call-parser", fam.tool_call_parser, list(fam.tool_call_parsers_ok)),
        ("--reasoning-parser", fam.reasoning_parser, list(fam.reasoning_parsers_ok)),
    ):
        value = ctx.value(name)
        info = ctx.rt.flags.get(name)
        if value is None or not ok or info is None or info.choices is None or value not in info.choices:
            continue
        if value not in ok:
            yield _f(
                "parser-mismatch",
                f"{name} {value} does not fit {fam.name} (expected one of {ok})",
                fix=flag_text(name, wanted),
            )


def _backends(ctx: _Ctx) -> Iterable[Finding]:
    facts = ctx.facts
    if facts.activation_mode is None:
        return
    linear = ctx.value("--linear-backend")
    moe = ctx.value("--moe-backend")
    linear = linear.lower().replace("-", "_") if linear else None
    moe = moe.lower().replace("-", "_") if moe else None
    if facts.weight_only_nvfp4:
        if linear in W4A4_ONLY_LINEAR:
            crash = ctx.rt.behaviour.linear_backend_w4a4_on_a16 == "crash"
            yield _f(
                "backend-activation-mismatch",
                f"--linear-backend {linear} runs W4A4 only, but this checkpoint's NVFP4 layers have no input "
                f"global scales ({facts.activation_mode})"
                + (
                    ": it crashes at load (missing input_global_scale_inv)"
                    if crash
                    else ": vLLM warns and falls back to a weight-only kernel"
                ),
                fix="remove --linear-backend",
                severity=None if crash else "warning",
            )
        if facts.moe and moe and moe not in A16_MOE_OK:
            yield _f(
                "backend-activation-mismatch",
                f"--moe-backend {moe} cannot run weight-only NVFP4 experts: vLLM raises 'NvFp4 MoE backend ... "
                f"does not support the deployment configuration'",
                fix="remove --moe-backend",
            )
    elif ctx.hw is not None and ctx.hw.native_fp4 and facts.activation_mode == "W4A4":
        for name, value in (("--linear-backend", linear), ("--moe-backend", moe)):
            if value == "marlin":
                yield _f(
                    "forced-marlin",
                    f"{name} marlin on a W4A4 checkpoint on {ctx.hw.id}: auto-selection "
                    f"picks the native FP4 path, faster here",
                    fix=f"remove {name}",
                )
    if (
        ctx.hw is not None
        and not ctx.hw.native_fp4
        and moe in ("cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cutedsl")
    ):
        yield _f(
            "backend-activation-mismatch",
            f"--moe-backend {moe} needs FP4 tensor cores, which {ctx.hw.id} "
            f"lacks: vLLM raises 'kernel does not support current device'",
            fix="remove --moe-backend",
        )


def _speculative(ctx: _Ctx) -> Iterable[Finding]:
    flag = ctx.cmd.last("--speculative-config")
    if flag is None:
        return
    try:
        spec = ctx.cmd.json_value("--speculative-config")
    except json.JSONDecodeError:
        return  # reported as invalid-flag-value
    if not isinstance(spec, dict):
        yield _f(
            "speculative-config-invalid",
            "--speculative-config must be a JSON object",
            fix=ctx.planned("--speculative-config"),
        )
        return
    method = spec.get("method")
    methods = ctx.rt.choices("speculative_method")
    model = str(spec.get("model") or "")
    if method is None and model and not any(k in model.lower() for k in ("dflash", "dspark", "eagle")):
        yield _f(
            "speculative-config-invalid",
            f"no method: vLLM cannot tell the method from the path {model!r} and loads it as a plain draft model",
            fix=ctx.planned("--speculative-config"),
        )
    elif method is not None and method not in methods:
        yield _f(
            "speculative-config-invalid",
            f"speculative method {method!r} is not known to {ctx.rt.name}",
            fix=ctx.planned("--speculative-config"),
        )
    if "num_speculative_tokens" not in spec and method not in ("ngram", "suffix"):
        yield _f(
            "speculative-config-invalid",
            "no num_speculative_tokens in --speculative-config",
            fix=ctx.planned("--speculative-config"),
        )
    mtp_aliases = ctx.rt.choices("mtp_model_types")
    canonical = "mtp" if method in mtp_aliases else method
    pair = serving().pairing(ctx.facts.architecture, canonical) if canonical else None
    n = spec.get("num_speculative_tokens")
    if pair and isinstance(n, int) and n != pair.num_speculative_tokens:
        yield _f(
            "speculative-tokens-untuned",
            f"num_speculative_tokens {n}; the measured optimum for "
            f"{pair.drafter} is {pair.num_speculative_tokens} ({pair.source})",
            fix=ctx.planned("--speculative-config"),
        )
    if canonical == "dflash":
        yield from _dflash(ctx, spec)


def _dflash(ctx: _Ctx, spec: dict) -> Iterable[Finding]:
    rules = ctx.rt.dflash
    if rules is None:
        return
    allowed = rules.kv_cache_dtypes
    kv = ctx.value("--kv-cache-dtype")
    if kv is not None and kv not in allowed:
        yield _f(
            "dflash-kv-cache-dtype",
            f"--kv-cache-dtype {kv} with a DFlash drafter on {ctx.rt.name}: no "
            f"non-causal attention backend supports it ({rules.source})",
            fix="remove --kv-cache-dtype",
        )
    fam = serving().family(ctx.facts.architecture, ctx.facts.model_type)
    want_drafter = (fam.dflash_drafter_attention_backend if fam else None) or rules.drafter_attention_backend
    have = spec.get("attention_backend")
    have = str(have).upper() if have is not None else None
    if want_drafter == "forbidden" and have is not None:
        yield _f(
            "dflash-attention-backend",
            f"attention_backend {have} inside the DFlash speculative config: on "
            f"{ctx.rt.name} the drafter needs its default backend",
            fix=ctx.planned("--speculative-config"),
        )
    elif want_drafter and want_drafter != "forbidden" and have != want_drafter and kv not in (None, "auto"):
        yield _f(
            "dflash-attention-backend",
            f"the DFlash drafter does not inherit the body's backend: set "
            f"\"attention_backend\":\"{want_drafter}\" in --speculative-config with --kv-cache-dtype {kv}",
            fix=ctx.planned("--speculative-config"),
        )
    body = ctx.value("--attention-backend")
    target = rules.target_attention_backend
    if body is not None and target and body.upper() not in (target, "AUTO"):
        yield _f(
            "dflash-attention-backend",
            f"--attention-backend {body}: DFlash on {ctx.rt.name} is validated with {target} on the body",
            fix=flag_text("--attention-backend", target),
            severity="warning",
        )


def _mamba(ctx: _Ctx) -> Iterable[Finding]:
    f = ctx.cmd.last("--mamba-block-size")
    if f is None:
        return
    prefix = ctx.cmd.last("--enable-prefix-caching")
    if prefix is not None and prefix.negated:
        yield _f(
            "mamba-block-size",
            "--mamba-block-size with --no-enable-prefix-caching: vLLM raises "
            "'--mamba-block-size can only be set with --enable-prefix-caching'",
            fix="remove --mamba-block-size",
        )
    elif prefix is None:
        yield _f(
            "mamba-block-size",
            "--mamba-block-size without --enable-prefix-caching: vLLM raises unless prefix caching ends up enabled",
            fix="remove --mamba-block-size",
        )
    elif _family_prefix_caching(ctx):
        yield _f(
            "mamba-block-size",
            "--mamba-block-size on a family whose hybrid cache geometry vLLM derives: "
            "unnecessary, and it can confuse the cache config",
            fix="remove --mamba-block-size",
            severity="warning",
        )


def _limits(ctx: _Ctx) -> Iterable[Finding]:
    hw = ctx.hw
    util = ctx.value("--gpu-memory-utilization")
    cap = hw.gpu_memory_utilization_max if hw else None
    if hw is not None and util is not None and cap is not None:
        try:
            if float(util) > cap:
                yield _f(
                    "memory-utilization-above-cap",
                    f"--gpu-memory-utilization {util} is above {hw.id}'s cap {cap}: unified memory page-thrashes",
                    fix=ctx.planned("--gpu-memory-utilization"),
                )
        except ValueError:
            pass
    tokens = ctx.value("--max-num-batched-tokens")
    if tokens is None:
        return
    try:
        n = parse_int(tokens, "human_int")
    except ValueError:
        return
    ceiling = ctx.rt.serve.compile_range_max_batched_tokens
    hw_max = hw.max_num_batched_tokens_max if hw else None
    limit = min(x for x in (ceiling, hw_max, float("inf")) if x is not None)
    if n > limit:
        reason = (
            f"the compile-range ceiling of {ctx.rt.name} ({ceiling}): prefill falls back to eager"
            if hw is None or (ceiling and n > ceiling)  # without a profile the limit is the ceiling
            else f"{hw.id}'s limit {hw_max}: activation memory presses unified memory at load"
        )
        yield _f(
            "batched-tokens-above-limit",
            f"--max-num-batched-tokens {tokens} exceeds {reason}",
            fix=ctx.planned("--max-num-batched-tokens"),
        )


def _family_prefix_caching(ctx: _Ctx) -> bool:
    fam = serving().family(ctx.facts.architecture, ctx.facts.model_type)
    return fam is not None and fam.prefix_caching


def _image(ctx: _Ctx) -> Iterable[Finding]:
    mismatch = ctx.rt.hardware_mismatch(ctx.hw)
    if mismatch:
        yield _f("runtime-hardware-mismatch", mismatch, fix=f"--runtime {default_runtime_id()}")
    image = ctx.cmd.image
    if image is None:
        return
    tail = image.rsplit("/", 1)[-1]
    if ":" not in tail or tail.endswith(":latest"):
        yield _f("unpinned-image", f"{image} is a moving tag; this check used {ctx.rt.id}", fix=ctx.rt.image)
