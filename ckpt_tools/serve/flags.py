"""The `vllm serve` argument vector for one checkpoint on one runtime and hardware profile, every flag with its reason
and source. Pure: takes analyses and profiles, returns a `ServePlan`; emitters render it, the serve checks re-check it."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..detect.quant_formats import format_for
from ..errors import UsageError
from ..knowledge.hardware import Hardware
from ..knowledge.runtimes import Runtime
from ..knowledge.serving import ServingFamily, serving
from ..pipeline import Analysis
from ..rules.base import SEVERITY_RANK, Finding
from ..rules.ck312_unsupported_architecture import UnsupportedArchitecture
from .facts import CheckpointFacts, checkpoint_facts, drafter_method


@dataclass(frozen=True)
class PlannedFlag:
    flag: str
    value: str | None  # None for a bare switch
    why: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"flag": self.flag, "value": self.value, "why": self.why, "source": self.source}


@dataclass(frozen=True)
class PlanOptions:
    model_path: str  # what the serve command names as the model (a host path, or /model inside a container)
    drafter_path: str | None = None
    max_model_len: int | None = None
    colocated: bool = False
    speculative_method: str | None = None
    served_model_name: str | None = None  # --served-model-name: what clients request instead of the path
    tensor_parallel_size: int | None = None  # --tensor-parallel-size: GPUs the model is split over (None: not set)


@dataclass(frozen=True)
class ServePlan:
    """The result of `ckpt serve-flags` (docs/report.schema.json "Serve flags")."""

    target: str
    runtime: Runtime
    hardware: Hardware | None
    model_path: str
    flags: tuple[PlannedFlag, ...]
    env: Mapping[str, str]
    warnings: tuple[str, ...]
    facts: CheckpointFacts
    drafter: Mapping[str, Any] | None = None
    blocked: str | None = None  # why the runtime will not serve this checkpoint at all
    alternatives: tuple[str, ...] = ()  # runtime profiles that do load it
    notes: tuple[str, ...] = field(default=())
    memory: Any = None  # the memory plan (ckpt_tools.plan.MemoryPlan) on this hardware, when one was made
    # The verdict: doctor's findings on the checkpoint plus check-serve's findings on this very command
    # (`ckpt_tools.serve.serve_verdict`), so serve-flags, check-serve and doctor never disagree.
    findings: tuple[Finding, ...] = ()

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (-SEVERITY_RANK[f.severity], f.code, f.message))

    @property
    def summary(self) -> dict[str, int]:
        counts = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings:
            counts[f.severity] += 1
        return counts

    def failing(self, fail_on: str = "error") -> list[Finding]:
        """Findings at or above `fail_on` (none for "none"): serve-flags refuses to hand off a command with any."""
        if fail_on == "none":
            return []
        return [f for f in self.sorted_findings() if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on]]

    def exit_code(self, fail_on: str = "error") -> int:
        return 1 if self.failing(fail_on) else 0

    @property
    def nvfp4_kernel(self) -> str | None:
        """The NVFP4 kernel family vLLM auto-selects on the chosen hardware for the activation mode it builds."""
        mode, hw = self.facts.activation_mode, self.hardware
        if mode is None or hw is None:
            return None
        return hw.nvfp4_w4a4 if mode == "W4A4" else hw.nvfp4_w4a16

    @property
    def argv(self) -> tuple[str, ...]:
        out = [*self.runtime.serve.command, self.model_path]
        for f in self.flags:
            out.append(f.flag)
            if f.value is not None:
                out.append(f.value)
        return tuple(out)

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    @property
    def shell_line(self) -> str:
        """The command as `ckpt serve-flags` prints it: the environment through `env` (so the line also runs as
        `$cmd` / `"${argv[@]}"`, not only through `eval`: an expanded `VAR=1 vllm ...` would try to run a program
        named `VAR=1`), then the shell-quoted argv."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return ("env " + env + " " if env else "") + self.command

    def to_dict(self) -> dict[str, Any]:
        from .._version import __version__

        return {
            "schema_version": 1,
            "tool": {"name": "ckpt", "version": __version__},
            "target": self.target,
            "runtime": self.runtime.id,
            "hardware": self.hardware.id if self.hardware else None,
            "argv": list(self.argv),
            "command": self.shell_line,  # the same line, shell-quoted, as the text output prints
            "env": dict(self.env),
            "flags": [f.to_dict() for f in self.flags],
            "warnings": list(self.warnings),
            # additions beyond the contract's required fields
            "findings": [f.to_dict() for f in self.sorted_findings()],
            "summary": self.summary,
            "image": self.runtime.image,
            "blocked": self.blocked,
            "alternatives": list(self.alternatives),
            "notes": list(self.notes),
            "drafter": dict(self.drafter) if self.drafter else None,
            "memory": self.memory.to_json() if self.memory is not None else None,
            "checkpoint": {
                "producer": self.facts.producer,
                "quant_algo": self.facts.quant_algo,
                "vllm_quantization": self.facts.vllm_quantization,
                "activation_mode": self.facts.activation_mode,
                "nvfp4_kernel": self.nvfp4_kernel,
                "architecture": self.facts.architecture,
                "max_model_len": self.facts.max_model_len,
                "vision": self.facts.has_vision,
                "vision_loadable": self.facts.vision_loadable,
                "kv_cache": self.facts.kv_cache,
            },
        }


def spec_json(config: Mapping[str, Any]) -> str:
    """The --speculative-config value: compact JSON, keys in vLLM's documented order."""
    return json.dumps(dict(config), separators=(",", ":"))


def accepting_runtimes(analysis: Analysis, current: str) -> tuple[str, ...]:
    """Runtime profiles (other than `current`) whose detection loads the checkpoint (unsupported-quant-algo's own
    list, so the plan and the finding name the same ones)."""
    from ..rules.ck310_unsupported_quant_algo import accepting_runtimes as accepting

    return accepting(analysis.checkpoint, current)


class _Builder:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.flags: list[PlannedFlag] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.env: dict[str, str] = {}

    def add(self, flag: str, value: str | None, why: str, source: str) -> None:
        info, _ = self.rt.lookup(flag)
        if info is None:  # never emit what the runtime's own table does not list
            raise ValueError(f"{flag} is not a {self.rt.id} flag")
        self.flags.append(PlannedFlag(flag, value, why, source))


def plan(
    analysis: Analysis,
    rt: Runtime,
    hw: Hardware | None,
    options: PlanOptions,
    *,
    drafter: Analysis | None = None,
    alternatives: tuple[str, ...] = (),
) -> ServePlan:
    facts = checkpoint_facts(analysis)
    b = _Builder(rt)
    # Refusals (the image not built for the GPU, a runtime or architecture that rejects the checkpoint) are findings
    # of the verdict (`serve_verdict`: check-serve's CS180, doctor's CK310 / CK312), not warnings here.
    blocked = None
    refused_arch = next(
        (
            f
            for f in analysis.report.findings
            if f.slug == UnsupportedArchitecture.slug and f.severity == "error" and f.details.get("architecture")
        ),
        None,
    )
    if refused_arch is not None and not facts.rejection:
        blocked = f"{rt.name} refuses this checkpoint: {refused_arch.message}"
    if facts.rejection:
        blocked = f"{rt.name} refuses this checkpoint: {facts.rejection}" + (
            f" Runtime profiles that load it: {', '.join(alternatives)}." if alternatives else ""
        )

    for finding in analysis.report.findings:
        if finding.slug == UnsupportedArchitecture.slug and finding is not refused_arch:
            b.warnings.append(finding.message)  # served, if at all, through the Transformers modeling backend

    _quantization(b, facts, rt)
    if options.served_model_name:
        b.add(
            "--served-model-name",
            options.served_model_name,
            "clients request the model by this name, not by the path or mount it is loaded from",
            "vllm/entrypoints/openai/cli_args.py, vLLM 0.33.0 (--served-model-name)",
        )
    _max_model_len(b, facts, rt, options)
    _tensor_parallel(b, rt, options)
    _hardware_limits(b, hw, rt, options)
    fam = serving().family(facts.architecture, facts.model_type)
    _family(b, facts, fam, rt)
    drafter_info = _speculative(b, facts, fam, rt, options, drafter)
    _kernel_notes(b, facts, hw)
    return ServePlan(
        target=analysis.report.target,
        runtime=rt,
        hardware=hw,
        model_path=options.model_path,
        flags=tuple(b.flags),
        env=b.env,
        warnings=tuple(b.warnings),
        facts=facts,
        drafter=drafter_info,
        blocked=blocked,
        alternatives=alternatives,
        notes=tuple(b.notes),
    )


def _quantization(b: _Builder, facts: CheckpointFacts, rt: Runtime) -> None:
    src = (
        "vllm/config/model.py ModelConfig._verify_quantization, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.1-1.5); "
        + rt.source_of("--quantization")
    )
    fmt = format_for(facts.producer)
    if facts.vllm_quantization and fmt is not None and fmt.id in fmt.override_from:
        # gptq / awq: the config class's override accepts the checkpoint's own name and turns it into the resolved
        # method; AutoAWQConfig has no override on a CPU platform, where only `awq` matches the checkpoint.
        b.add(
            "--quantization",
            fmt.id,
            f"{fmt.name} checkpoint: vLLM resolves {facts.vllm_quantization} from --quantization {fmt.id} "
            f"({fmt.config_class}.override_quantization_method), and `{fmt.id}` also matches the checkpoint where "
            f"no override runs; stating it makes a wrong copy-paste fail loudly.",
            fmt.source,
        )
    elif facts.vllm_quantization:
        b.add(
            "--quantization",
            facts.vllm_quantization,
            f"{facts.producer} {facts.quant_algo or ''} checkpoint: vLLM resolves --quantization "
            f"{facts.vllm_quantization} from its config; stating it makes a wrong copy-paste fail loudly.".replace(
                "  ", " "
            ),
            src,
        )
        deprecated = rt.quantization.deprecated_methods
        if facts.vllm_quantization in deprecated:
            b.add(
                "--allow-deprecated-quantization",
                None,
                f"--quantization {facts.vllm_quantization} is deprecated in {rt.name}: vLLM refuses to start "
                f"without this switch",
                "vllm/model_executor/layers/quantization/__init__.py "
                "DEPRECATED_QUANTIZATION_METHODS; vllm/config/model.py _verify_quantization (vLLM 0.33.0)",
            )
    elif facts.producer == "none":
        b.notes.append("--quantization omitted: the checkpoint is not quantized")
    else:
        b.notes.append("--quantization omitted: the runtime does not resolve a method for this checkpoint")


def _max_model_len(b: _Builder, facts: CheckpointFacts, rt: Runtime, options: PlanOptions) -> None:
    derived = facts.max_model_len
    src = (
        "vllm/config/model.py _get_and_verify_max_len, vLLM 0.33.0 (docs/reference/vllm-0.33.md §7.5); config.json "
        + (facts.max_len_key or "")
    )
    asked = options.max_model_len
    if asked is not None:
        if asked <= 0:
            raise UsageError("--max-model-len must be a positive number of tokens")
        # Asked for more than the context, the command is emitted as asked and never opts into
        # VLLM_ALLOW_LONG_MAX_MODEL_LEN for the user: vLLM refuses it, and max-model-len-exceeded (the verdict
        # `ckpt plan` and check-serve give the same length) says so and how to override it knowingly.
        b.add("--max-model-len", str(asked), "context length asked for with --max-model-len", src)
    elif derived is not None:
        b.add(
            "--max-model-len",
            str(derived),
            f"the checkpoint's context ({facts.max_len_key}={derived}); explicit so a longer copy-paste fails",
            src,
        )


def _tensor_parallel(b: _Builder, rt: Runtime, options: PlanOptions) -> None:
    """--tensor-parallel-size as asked: emitted as it is, whether or not vLLM accepts it. A size that does not split
    the model is the verdict's (tensor-parallel-indivisible, block-fp8-tp-size: the checks check-serve runs on the
    same command, and `ckpt plan -tp` on the same setting), never silently changed; the memory plan sizes the
    weights and KV cache per GPU at it (`fit_serve_plan`)."""
    tp = options.tensor_parallel_size
    if tp is None:
        return
    if tp < 1:
        raise UsageError("--tensor-parallel-size must be at least 1")
    b.add(
        "--tensor-parallel-size",
        str(tp),
        f"the model is split over {tp} GPU{'s' if tp != 1 else ''} (asked with --tensor-parallel-size)",
        rt.source_of("--tensor-parallel-size"),
    )


def _hardware_limits(b: _Builder, hw: Hardware | None, rt: Runtime, options: PlanOptions) -> None:
    if hw is None:
        if options.colocated:
            b.warnings.append("--colocated needs --hardware: the memory share for sidecars is per hardware profile")
        return
    util = hw.gpu_memory_utilization_colocated if options.colocated else hw.gpu_memory_utilization
    if util is not None:
        default = rt.serve.gpu_memory_utilization_default  # not every image profile records one
        why = (
            "leaves unified memory to the sidecars sharing the GPU"
            if options.colocated
            else f"{hw.id} shares its memory between CPU and GPU; above {hw.gpu_memory_utilization_max} it "
            f"page-thrashes" + (f" (the runtime's default is {default})" if default is not None else "")
        )
        b.add("--gpu-memory-utilization", f"{util:.2f}", why, hw.serving_citation)
    elif options.colocated:
        b.warnings.append(
            f"{hw.id} has no measured memory share for sidecars: set --gpu-memory-utilization to "
            f"(GPU memory - sidecar memory) / GPU memory yourself"
        )
    tokens = hw.max_num_batched_tokens
    if tokens is not None:
        ceiling = rt.serve.compile_range_max_batched_tokens
        b.add(
            "--max-num-batched-tokens",
            str(tokens),
            "stays inside the compiled range and frees activation memory; chunked prefill keeps the full context"
            + (f" (compile-range ceiling {ceiling})" if ceiling else ""),
            hw.serving_citation,
        )


def _family(b: _Builder, facts: CheckpointFacts, fam: ServingFamily | None, rt: Runtime) -> None:
    if fam is None:
        b.notes.append(f"no serving entry for {facts.architecture or facts.model_type}: no parsers or limits emitted")
        return
    src = f"rules/serving.toml ({fam.id}): {fam.source}"
    if fam.prefix_caching:
        b.add(
            "--enable-prefix-caching",
            None,
            "hybrid attention family: prefix caching on, --mamba-block-size left for vLLM to derive",
            src,
        )
    limits = fam.mm_limits
    if facts.has_vision and not facts.vision_loadable:
        # The defect itself is misnested-prefix's finding (CK201), which refuses the command; this says only why
        # a command printed anyway (--fail-on none) has no image limits.
        b.notes.append("--limit-mm-per-prompt omitted: the vision tower is not loadable (misnested-prefix)")
    elif facts.vision_loadable and limits:
        b.add(
            "--limit-mm-per-prompt",
            json.dumps(dict(limits), separators=(",", ":")),
            "vision tower present and loadable: the family's tuned image/video limits",
            src,
        )
    elif facts.vision_loadable:
        b.notes.append(
            "vision tower present; no tuned limits for this family, vLLM's default (999 per modality) applies"
        )
    if fam.reasoning_parser:
        b.add("--reasoning-parser", fam.reasoning_parser, "the family's reasoning format", src)
    if fam.tool_call_parser:
        b.add("--enable-auto-tool-choice", None, "tool calls need auto tool choice and a parser", src)
        b.add("--tool-call-parser", fam.tool_call_parser, "the family's tool-call format", src)


def _speculative(
    b: _Builder,
    facts: CheckpointFacts,
    fam: ServingFamily | None,
    rt: Runtime,
    options: PlanOptions,
    drafter: Analysis | None,
) -> dict[str, Any] | None:
    method = options.speculative_method
    if drafter is not None:
        detected = drafter_method(drafter, rt)
        if method is None:
            method = detected
        if method is None:
            raise UsageError(
                f"cannot tell the speculative method of drafter {drafter.report.target} from its "
                f"config.json or folder name; pass --speculative-method"
            )
    elif method is None and facts.has_mtp and serving().pairing(facts.architecture, "mtp"):
        method = "mtp"
    if method is None:
        return None
    methods = rt.choices("speculative_method")
    if method not in methods:
        raise UsageError(f"{rt.id} has no speculative method {method!r}; choose one of: {', '.join(methods)}")
    if method in serving().speculative.needs_drafter and options.drafter_path is None:
        raise UsageError(f"speculative method {method} needs --drafter DIR")
    pair = serving().pairing(facts.architecture, method)
    config: dict[str, Any] = {"method": method}
    if options.drafter_path is not None and method not in ("mtp", "ngram", "ngram_gpu", "suffix"):
        config["model"] = options.drafter_path
    src = (
        f"vllm/config/speculative.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §7.2); rules/serving.toml [[pairing]]: {pair.source}"
        if pair
        else "vllm/config/speculative.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §7.2)"
    )
    if pair:
        config["num_speculative_tokens"] = pair.num_speculative_tokens
    else:
        config["num_speculative_tokens"] = 1 if method == "mtp" else 4
        b.warnings.append(
            f"no tuned num_speculative_tokens for {method} on {facts.architecture}: "
            f"{config['num_speculative_tokens']} is a starting point; measure acceptance"
        )
    if method == "dflash":
        _dflash(b, facts, fam, rt, config)
    b.add(
        "--speculative-config",
        spec_json(config),
        f"{method} speculative decoding"
        + (f" with the tuned {config['num_speculative_tokens']} draft tokens ({pair.drafter})" if pair else ""),
        src,
    )
    info: dict[str, Any] = {"method": method, "path": options.drafter_path}
    if drafter is not None:
        info.update(
            target=drafter.report.target,
            producer=drafter.detection.producer,
            architecture=drafter.checkpoint.architecture,
            rejection=drafter.detection.rejection,
        )
        if drafter.detection.rejection:
            b.warnings.append(f"the drafter is refused by {rt.name}: {drafter.detection.rejection}")
    return info


def _dflash(
    b: _Builder, facts: CheckpointFacts, fam: ServingFamily | None, rt: Runtime, config: dict[str, Any]
) -> None:
    rules = rt.dflash
    if rules is None:
        return
    src = f"rules/runtimes ({rt.id}) [speculative.dflash]: {rules.source}"
    allowed = rules.kv_cache_dtypes
    if facts.kv_cache and facts.kv_cache not in allowed and "auto" in allowed and len(allowed) == 1:
        b.warnings.append(
            f"the checkpoint declares a {facts.kv_cache} KV cache, which `auto` selects; DFlash on "
            f"{rt.name} needs BF16 KV: expect 'No valid attention backend found' at start-up"
        )
    target_backend = rules.target_attention_backend
    if target_backend:
        b.add("--attention-backend", target_backend, "the body backend DFlash's KV-sharing path is validated with", src)
    drafter_backend = (fam.dflash_drafter_attention_backend if fam else None) or rules.drafter_attention_backend
    if drafter_backend and drafter_backend != "forbidden":
        # vLLM does not inherit the target's backend into the drafter.
        config["attention_backend"] = drafter_backend


def _kernel_notes(b: _Builder, facts: CheckpointFacts, hw: Hardware | None) -> None:
    if facts.activation_mode is None:
        return
    if facts.weight_only_nvfp4:
        b.notes.append(
            f"{facts.activation_mode} NVFP4 (the config declares weight-only layers): vLLM auto-selects a "
            f"weight-only kernel (Marlin/Humming/CuTe-DSL W4A16); do not force a W4A4 backend "
            f"(flashinfer_cutlass, cutlass)"
        )
    elif hw is not None and hw.native_fp4:
        b.notes.append(
            f"W4A4 NVFP4 (the config declares input activations): vLLM builds W4A4 and auto-selects "
            f"{hw.nvfp4_w4a4} on {hw.id}"
        )
    elif hw is None:
        b.notes.append(
            "W4A4 NVFP4 (the config declares input activations): vLLM builds W4A4; on GPUs without FP4 "
            "tensor cores (Hopper) it falls back to Marlin weight-only"
        )
    b.notes.append("no --linear-backend / --moe-backend: auto-selection picks the native path for this checkpoint")
