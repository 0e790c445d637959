"""Serve flags: the exact `vllm serve` command for a checkpoint on a runtime and hardware profile, and the checks of
existing commands. Modules: facts (checkpoint facts), flags (the argument vector, every flag with its reason),
emitters, parser, memory, and checks/ (one module per CS code, under the CK rules' contract)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..knowledge.hardware import Hardware
from ..knowledge.hardware import hardware as hardware_profile
from ..knowledge.runtimes import Runtime, runtime_for_image
from ..knowledge.runtimes import runtime as runtime_profile
from ..report.model import Report
from ..rules.base import Finding
from .emitters import DRAFTER_MOUNT, MODEL_MOUNT
from .flags import PlannedFlag, PlanOptions, ServePlan, accepting_runtimes, plan

if TYPE_CHECKING:
    from ..pipeline import JudgementInProgress

__all__ = [
    "CheckServeResult",
    "PlannedFlag",
    "ServePlan",
    "check_serve",
    "planned_command",
    "serve_flags",
    "serve_verdict",
]


def _profiles(runtime: str | None, hardware: str | None) -> tuple[Runtime, Hardware | None]:
    rt = runtime_profile(runtime)
    wanted = hardware or rt.serve.default_hardware
    return rt, hardware_profile(wanted) if wanted else None


def _hardware_ids(hw: Hardware | None) -> tuple[str, ...]:
    return (hw.id,) if hw is not None else ()


def serve_flags(
    target: str | os.PathLike[str],
    *,
    runtime: str | None = None,
    hardware: str | None = None,
    drafter: str | os.PathLike[str] | None = None,
    max_model_len: int | None = None,
    colocated: bool = False,
    container: bool = False,
    speculative_method: str | None = None,
    revision: str | None = None,
    headers_only: bool = False,
    deep: bool = False,
    progress: bool | None = None,
    repo_id: str | None = None,
    served_model_name: str | None = None,
    keep: Callable[[tuple[object, ...]], None] | None = None,
    tensor_parallel_size: int | None = None,
) -> ServePlan:
    """The `vllm serve` plan for `target` (a folder, a .safetensors file or a Hub repo id), with the verdict in
    `plan.findings`: doctor's findings plus check-serve's on the planned command (`plan.exit_code(fail_on)`).
    `container=True` (the recipes of `--emit docker|compose|model-card`) never names a local path: the model is the
    Hub repo id (`repo_id`, else inferred from a Hub target, a Hugging Face cache snapshot or a Hub git clone) or the
    /model mount, the drafter /drafter, and `--served-model-name` is set (`served_model_name`, else the repo id or
    the folder's name). `keep` receives the analyses judged (the checkpoint's, then the drafter's if any), for a
    caller that decides when they are freed (`ckpt serve-flags` leaves them to process exit). Raises `CkptError`
    when the target or drafter cannot be read."""
    from .. import _inputs
    from ..pipeline import analyze

    target = _inputs.target(target)
    drafter = _inputs.target(drafter, "drafter") if drafter is not None else None
    max_model_len = _inputs.positive_int(max_model_len, "max_model_len")
    tensor_parallel_size = _inputs.positive_int(tensor_parallel_size, "tensor_parallel_size", "GPUs")
    rt, hw = _profiles(_inputs.optional_id(runtime, "runtime"), _inputs.optional_id(hardware, "hardware"))
    analysis = analyze(
        target,
        runtime=rt.id,
        hardware_ids=_hardware_ids(hw),
        headers_only=headers_only,
        deep=deep,
        revision=revision,
        progress=progress,
        while_scanning=_load_serving,
    )
    drafter_analysis = analyze(drafter, runtime=rt.id, headers_only=True) if drafter else None
    alternatives = accepting_runtimes(analysis, rt.id) if analysis.detection.rejection else ()
    if container:
        from .publish import HUB_ID, infer_repo_id, served_name

        if repo_id is not None and not HUB_ID.match(repo_id):
            raise UsageError(f"--repo-id {repo_id!r} is not a Hub repo id (org/name)")
        repo_id = repo_id or infer_repo_id(target)
        served_model_name = served_model_name or served_name(target, repo_id)
    options = PlanOptions(
        model_path=(repo_id or MODEL_MOUNT) if container else target,
        drafter_path=(DRAFTER_MOUNT if container else drafter) if drafter else None,
        max_model_len=max_model_len,
        colocated=colocated,
        speculative_method=speculative_method,
        served_model_name=served_model_name,
        tensor_parallel_size=tensor_parallel_size,
    )
    from .memory import fit_serve_plan

    planned = plan(analysis, rt, hw, options, drafter=drafter_analysis, alternatives=alternatives)
    fitted = fit_serve_plan(planned, analysis, drafter_analysis, max_model_len)
    verdict = serve_verdict(analysis, planned_command(fitted), rt, hw, fitted, drafter_path=drafter)
    if keep is not None:
        keep((analysis,) if drafter_analysis is None else (analysis, drafter_analysis))
    return replace(fitted, findings=verdict)


def _load_serving(_judging: JudgementInProgress) -> None:
    """While the value scan runs (`analyze(while_scanning=...)`): import what planning and judging the command read next
    (the memory planner, the command parser, every serve check), which would otherwise wait for the scan to end."""
    from .checks import all_checks
    from .memory import fit_serve_plan  # noqa: F401
    from .parser import parse_command  # noqa: F401

    all_checks()


def planned_command(the_plan: ServePlan):
    """The plan's own command (environment included) as check-serve parses it."""
    from .parser import parse_command

    env = [f"{k}={v}" for k, v in the_plan.env.items()]
    return parse_command((["env", *env] if env else []) + list(the_plan.argv), the_plan.runtime)


def serve_verdict(
    analysis, cmd, rt: Runtime, hw: Hardware | None, the_plan: ServePlan, *, drafter_path: str | None = None
) -> tuple[Finding, ...]:
    """The one verdict of serving a checkpoint with a command: doctor's findings on the checkpoint (same analysis,
    same severities), then check-serve's findings on the command (its flags and environment, and whether its
    settings fit the GPU's memory). serve-flags judges its own planned command with it, check-serve the user's, so
    the two agree on every fact they share."""
    from .checks import ServeContext, run_checks

    ctx = ServeContext(cmd, rt, hw, the_plan.facts, the_plan, analysis, drafter_path)
    return (*analysis.report.findings, *run_checks(ctx))


@dataclass(frozen=True)
class CheckServeResult(Report):
    """The verdict of `ckpt check-serve`: a `Report` (doctor's findings on the checkpoint, then the command's; the same
    JSON contract, `summary`, `exit_code(fail_on)` and `render(format)` as the CLI's), plus the serve plan the command
    was compared with (`plan`)."""

    plan: ServePlan | None = None
    command: str = "check-serve"

    @property
    def report(self) -> Report:
        """The report itself (earlier releases held it in this attribute)."""
        return self


def check_serve(
    target: str | os.PathLike[str],
    command: str | Sequence[str],
    *,
    runtime: str | None = None,
    hardware: str | None = None,
    revision: str | None = None,
    headers_only: bool = False,
    deep: bool = False,
    progress: bool | None = None,
    keep: Callable[[tuple[object, ...]], None] | None = None,
) -> CheckServeResult:
    """Lint an existing `vllm serve` / `docker run` command (one string, or an argv list) against the checkpoint
    and the profiles; the report also carries doctor's findings on the checkpoint. Without `runtime`, a
    `docker run` of a known image picks that image's profile. `keep` receives the analysis judged, as for `serve_flags`."""
    from .. import _inputs
    from ..pipeline import analyze
    from .parser import parse_command, split_command

    target = _inputs.target(target)
    runtime, hardware = _inputs.optional_id(runtime, "runtime"), _inputs.optional_id(hardware, "hardware")
    words = split_command(_inputs.command(command))
    rt = runtime_profile(runtime)
    if runtime is None:
        image = _image_of(words)
        by_image = runtime_for_image(image) if image else None
        if by_image is not None:
            rt = by_image
    rt, hw = _profiles(rt.id, hardware)
    cmd = parse_command(words, rt)
    analysis = analyze(
        target,
        runtime=rt.id,
        hardware_ids=_hardware_ids(hw),
        headers_only=headers_only,
        deep=deep,
        revision=revision,
        progress=progress,
        while_scanning=_load_serving,
    )
    in_container = (
        cmd.kind == "docker" and cmd.model is not None and cmd.model.startswith("/") and not os.path.exists(cmd.model)
    )
    alternatives = accepting_runtimes(analysis, rt.id) if analysis.detection.rejection else ()
    spec_drafter, method = _speculative_of(cmd, rt)
    options = PlanOptions(
        model_path=cmd.model or (MODEL_MOUNT if in_container else target),
        drafter_path=spec_drafter,
        speculative_method=method,
    )
    the_plan = plan(analysis, rt, hw, options, alternatives=alternatives)
    findings = serve_verdict(analysis, cmd, rt, hw, the_plan, drafter_path=spec_drafter)
    result = CheckServeResult(
        target=analysis.report.target,
        checkpoint=dict(analysis.report.checkpoint),
        findings=findings,
        skipped=analysis.report.skipped,
        suppressed=analysis.report.suppressed,
        extra={
            "runtime": rt.id,
            "hardware": hw.id if hw else None,
            "command": list(words),
            "suggested_argv": list(the_plan.argv),
        },
        plan=replace(the_plan, findings=findings),
    )
    if keep is not None:
        keep((analysis,))
    return result


def _image_of(words: Sequence[str]) -> str | None:
    from .parser import parse_command

    if "docker" not in words[:3]:
        return None
    try:
        return parse_command(words, runtime_profile(None)).image
    except Exception:  # noqa: BLE001 - a bad command is reported by the real parse below
        return None


def _speculative_of(cmd, rt: Runtime) -> tuple[str | None, str | None]:
    """(drafter path, canonical method) of the command's speculative config, for the reference plan."""
    import json

    try:
        spec = cmd.json_value("--speculative-config")
    except (json.JSONDecodeError, TypeError):
        return None, None
    if not isinstance(spec, dict):
        return None, None
    path = str(spec["model"]) if spec.get("model") else None
    method = spec.get("method")
    if method in rt.choices("mtp_model_types"):
        method = "mtp"
    if method not in rt.choices("speculative_method") or (method != "mtp" and path is None):
        method = None
    return path, method
