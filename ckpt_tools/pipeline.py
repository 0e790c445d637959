"""read -> model -> detect -> rules -> report, as one call."""

from __future__ import annotations

import gc
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from .detect.resolve import Detection, detect
from .errors import TargetError
from .knowledge.hardware import Hardware, hardware
from .knowledge.hardware import profiles as hardware_profiles
from .model.checkpoint import INDEX_NAME, Checkpoint, with_value_data
from .model.tensors import TensorInfo
from .model.values import STATS_DTYPES, value_dtype
from .read import open_source
from .read.background_scan import BackgroundScan
from .read.configs import read_index
from .read.loader import load_checkpoint
from .read.local import LocalSource
from .read.repair_state import pending_repair
from .report.model import Report, SkippedRule
from .rules.base import Context, Finding, Rule, all_rules
from .suppress import Suppression, apply_suppressions, load_suppressions
from .vllm_dry.run import DryRunOptions, start_dry_run


@dataclass(frozen=True)
class JudgeSettings:
    """How a checkpoint is judged: `rejudge` applies the same to another Checkpoint, e.g. the after-state a repair
    plans. `silenced`: (code, reason) of value rules not run because a suppression silences them outright."""

    target: str  # how the user named the target, for fix commands
    label: str  # the report's target
    runtime: str | None = None
    hardware_ids: tuple[str, ...] = ()
    skipped_reason: str | None = None  # why the value rules were skipped (headers only, remote), if they were
    silenced: tuple[tuple[str, str], ...] = ()
    producer_schema: bool = False
    suppressions: tuple[Suppression, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)  # the report's `extra`


@dataclass(frozen=True)
class Analysis:
    checkpoint: Checkpoint
    detection: Detection
    report: Report
    settings: JudgeSettings = field(repr=False, compare=False)  # how the checkpoint was judged


def rejudge(analysis: Analysis, ckpt: Checkpoint) -> Analysis:
    """Judge `ckpt` exactly as `analysis` was judged (same runtime, hardware, suppressions and skipped rules)."""
    with _cyclic_gc_paused():
        return judge(ckpt, analysis.settings)


def value_rules(suppressions: Sequence[Suppression]) -> tuple[list[type[Rule]], list[tuple[type[Rule], str]]]:
    """(value rules that run, value rules suppressed outright with the reason). A rule silenced by a `rule` entry
    without tensor globs would have all its findings suppressed, so its values are not read at all."""
    run: list[type[Rule]] = []
    silenced: list[tuple[type[Rule], str]] = []
    for rule in all_rules():
        if not rule.needs_values:
            continue
        entry = next((s for s in suppressions if s.rule == rule.code and not s.globs), None)
        if entry is None:
            run.append(rule)
        else:
            silenced.append((rule, f"suppressed in {entry.source}: {entry.reason} (its values were not read)"))
    return run, silenced


def wanted_values(rules: Sequence[type[Rule]]) -> Callable[[TensorInfo], bool]:
    """The union of what `rules` ask for (`Rule.wants_values`): the tensors the value scan measures."""
    asks = [rule.wants_values for rule in rules]
    # `Rule.wants_values` answers from dtype, shape and suffix alone: a checkpoint has a few hundred such triples
    # over its hundreds of thousands of tensors.
    known: dict[tuple[str, str, tuple[int, ...]], bool] = {}

    def wanted(t: TensorInfo) -> bool:
        key = (t.dtype, t.name.rpartition(".")[2], t.shape)
        try:
            return known[key]
        except KeyError:
            answer = known[key] = value_dtype(t) in STATS_DTYPES and any(ask(t) for ask in asks)
            return answer

    return wanted


def analyze(
    target: str,
    *,
    runtime: str | None = None,
    hardware_ids: Sequence[str] = (),
    headers_only: bool = False,
    deep: bool = False,
    revision: str | None = None,
    progress: bool | None = None,
    producer_schema: bool = False,
    lone_shard: bool = False,
    while_scanning: Callable[[JudgementInProgress], None] | None = None,
    vllm: DryRunOptions | None = None,
) -> Analysis:
    """Inspect a checkpoint and judge it. Raises `ckpt_tools.errors.CkptError` when there is nothing to inspect.

    A target that is one shard of a sharded checkpoint is refused (rules that span shards would judge it as a
    whole model, and repairs must update the index) unless `lone_shard` is set: a census of the shard.
    `while_scanning`: called with the judgement so far while the value scan still runs (`judge`); never without a scan.
    `vllm`: also load the headers with vLLM's own code (`ckpt doctor --vllm`, vllm_dry/); its verdict replaces the
    load model's in the CK60x findings (vllm_dry/combine.py).
    """
    with _cyclic_gc_paused():
        source = open_source(target, revision)
        if not lone_shard:
            _refuse_lone_shard(source)
        suppressions = load_suppressions(source)
        ckpt = load_checkpoint(source)
        if isinstance(source, LocalSource):
            # Reported (CK109), never acted on: only `ckpt repair --resume / --rollback` and the repairs write.
            ckpt = replace(ckpt, pending_repair=pending_repair(source.root))
        # vLLM's dry run (mostly its import) runs in its own process while this one reads and judges.
        dry = None if vllm is None else start_dry_run(source, ckpt, vllm)
        try:
            analysis = _judge_read(
                source,
                ckpt,
                suppressions,
                target=target,
                runtime=runtime,
                hardware_ids=hardware_ids,
                headers_only=headers_only,
                deep=deep,
                progress=progress,
                producer_schema=producer_schema,
                while_scanning=while_scanning,
                vllm=dry,
            )
            return analysis if dry is None else _with_vllm_extra(analysis, dry.result())
        finally:
            if dry is not None:
                dry.close()


def _judge_read(
    source: Any,
    ckpt: Checkpoint,
    suppressions: Sequence[Suppression],
    *,
    target: str,
    runtime: str | None,
    hardware_ids: Sequence[str],
    headers_only: bool,
    deep: bool,
    progress: bool | None,
    producer_schema: bool,
    while_scanning: Callable[[JudgementInProgress], None] | None,
    vllm: Any,
) -> Analysis:
    """`analyze` after the checkpoint is read: the settings, then the judgement, beside the value scan if any."""
    run_values, silenced = value_rules(suppressions)
    skipped_reason = None
    if headers_only:
        skipped_reason = "--headers-only: scale values were not read"
    elif source.is_remote and not deep:
        skipped_reason = "remote target: scale values are read only with --deep"
    # A Hub source says which commit was read (`hub` in the report); a local one has nothing to add.
    provenance = getattr(source, "provenance", None)
    settings = JudgeSettings(
        target=target,
        label=source.label,
        runtime=runtime,
        hardware_ids=tuple(hardware_ids),
        skipped_reason=skipped_reason,
        silenced=tuple((r.code, why) for r, why in silenced),
        producer_schema=producer_schema,
        suppressions=tuple(suppressions),
        extra={"hub": provenance} if provenance else {},
    )
    if skipped_reason or not run_values:
        return judge(
            replace(ckpt, values_skipped=skipped_reason or "every value rule is suppressed"), settings, vllm=vllm
        )
    # The scan runs beside detection and the header rules (`BackgroundScan`); the value rules wait for it.
    scan = BackgroundScan(source, ckpt, wanted_values(run_values), progress=progress)
    try:
        return judge(
            ckpt,
            settings,
            scanned=lambda: with_value_data(ckpt, values=scan.result()),
            while_scanning=while_scanning,
            vllm=vllm,
        )
    finally:
        scan.close()


def _with_vllm_extra(analysis: Analysis, dry: Any) -> Analysis:
    """The report's `extra.vllm`: which vLLM judged, on which platform, and where its time went."""
    info = {
        "judged_by": dry.accounting.judged_by,
        "platform": dry.platform,
        "seconds": {k: round(v, 3) for k, v in dry.seconds.items()},
        "build_error": dry.accounting.build_error,
    }
    report = replace(analysis.report, extra={**analysis.report.extra, "vllm": info})
    return replace(analysis, report=report)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a checkpoint is read and judged. An analysis allocates a few objects
    per tensor (hundreds of thousands) and frees none of them until it ends, so every full collection meanwhile
    re-walks all of them for nothing (docs/performance.md); reference
    counting still frees everything as usual, and the collector's previous state is restored afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def judge(
    ckpt: Checkpoint,
    settings: JudgeSettings,
    *,
    scanned: Callable[[], Checkpoint] | None = None,
    while_scanning: Callable[[JudgementInProgress], None] | None = None,
    vllm: Any = None,
) -> Analysis:
    """Detect and run every rule on a `Checkpoint` already in memory: the one verdict every command shares (doctor,
    serve-flags, check-serve, and the repairs' predicted after-states, which judge planned headers). With `scanned` (a value
    scan still running), detection and the header rules judge `ckpt` meanwhile, and the value rules the checkpoint
    `scanned()` returns: `ckpt` with its statistics. `while_scanning`, with `scanned`, is called once the header rules are
    done and before waiting for the scan, with the judgement so far: a repair plans on its verdict so far
    (`JudgementInProgress.interim`, made only when asked), serve-flags loads what it reads next."""
    judging = JudgementInProgress.start(ckpt, settings, values_later=scanned is not None, vllm=vllm)
    if scanned is None:
        return judging.finish()
    if while_scanning is not None:
        while_scanning(judging)
    return judging.finish(scanned())


@dataclass(frozen=True)
class JudgementInProgress:
    """One judgement in two steps: detection and every rule but the value rules a scan has yet to feed (`start`),
    then those on the scanned checkpoint (`finish`). `judge` is both at once; a repair starts its after-state's
    judgement while the before-state's scan runs, and finishes it with the value statistics carried over."""

    ckpt: Checkpoint
    det: Detection
    profiles: tuple[Hardware, ...]
    ctx: Context
    per_rule: list[list[Finding]]
    deferred: list[tuple[int, type[Rule]]]  # (slot in per_rule, value rule): run by `finish`
    skipped: list[SkippedRule]
    settings: JudgeSettings
    # The report's `checkpoint` section, made by `start`: it reads the detection and the header views alone, which the
    # scanned checkpoint shares with the one `start` judged (they differ in `values` only).
    summary: dict

    @classmethod
    def start(
        cls, ckpt: Checkpoint, settings: JudgeSettings, *, values_later: bool = False, vllm: Any = None
    ) -> JudgementInProgress:
        """Detect, then run every rule in order, except, with `values_later`, the value rules (left to `finish`)."""
        det = detect(ckpt, settings.runtime)
        profiles: tuple[Hardware, ...] = (
            tuple(hardware(h) for h in settings.hardware_ids) if settings.hardware_ids else hardware_profiles()
        )
        schema, skipped = _producer_schema(ckpt, det) if settings.producer_schema else (None, [])
        ctx = Context(ckpt=ckpt, det=det, hardware=profiles, target=settings.target, producer_schema=schema, vllm=vllm)
        per_rule, deferred = _run_rules(ctx, skipped, settings.skipped_reason, dict(settings.silenced), values_later)
        summary = checkpoint_summary(ckpt, det, profiles if settings.hardware_ids else ())
        return cls(ckpt, det, profiles, ctx, per_rule, deferred, skipped, settings, summary)

    def interim(self) -> Analysis:
        """The verdict so far, on the checkpoint as `start` judged it: every finding but the deferred value rules'
        (suppressions applied). Exactly the final verdict's findings of every rule that is not deferred: each rule's
        findings are its own (nothing a rule reports depends on another's), and a suppression acts on each finding
        alone."""
        return self._analysis(self.ctx)

    def finish(self, scanned: Checkpoint | None = None) -> Analysis:
        """The verdict: the deferred value rules run on `scanned` (the checkpoint `start` judged, with its value
        statistics), in their places in rule order."""
        if self.deferred and scanned is None:
            raise ValueError("the value rules wait for the scanned checkpoint")
        ctx = self.ctx if scanned is None else replace(self.ctx, ckpt=scanned)
        per_rule = list(self.per_rule)
        for slot, rule_cls in self.deferred:
            per_rule[slot] = list(rule_cls().check(ctx))
        return self._analysis(ctx, per_rule)

    def _analysis(self, ctx: Context, per_rule: list[list[Finding]] | None = None) -> Analysis:
        found = [f for found in (self.per_rule if per_rule is None else per_rule) for f in found]
        findings, suppressed = apply_suppressions(found, self.settings.suppressions)
        report = Report(
            target=self.settings.label,
            checkpoint=dict(self.summary),
            findings=tuple(findings),
            skipped=tuple(self.skipped),
            suppressed=tuple(suppressed),
            extra=dict(self.settings.extra),
        )
        return Analysis(ctx.ckpt, self.det, report, self.settings)


def _producer_schema(ckpt: Checkpoint, det: Detection) -> tuple[Any, list[SkippedRule]]:
    """The producer's own schema check (`--producer-schema`), and CK311's skipped entry when its package is absent."""
    from .detect.producer_schema import check_producer_schema
    from .rules.ck311_producer_schema import ProducerSchema

    schema = check_producer_schema(ckpt, det)
    if schema is None or schema.package is not None:
        return schema, []
    reason = f"{schema.producer} is not installed (pip install 'ckpt-tools[producers]')"
    return schema, [{"code": ProducerSchema.code, "slug": ProducerSchema.slug, "reason": reason}]


def _run_rules(
    ctx: Context,
    skipped: list[SkippedRule],
    skipped_reason: str | None,
    not_run: Mapping[str, str],
    values_later: bool = False,
) -> tuple[list[list[Finding]], list[tuple[int, type[Rule]]]]:
    """Every registered rule's findings, one list per rule in rule order, and the value rules left for later; a
    value rule without values (headers only, or silenced outright by a suppression) is recorded in `skipped` with the
    reason instead. With `values_later`, each value rule gets an empty list now and is returned with its slot, to run
    on the scanned checkpoint once the header rules are done."""
    per_rule: list[list[Finding]] = []
    deferred: list[tuple[int, type[Rule]]] = []
    for rule_cls in all_rules():
        reason = (skipped_reason or not_run.get(rule_cls.code)) if rule_cls.needs_values else None
        if reason:
            skipped.append({"code": rule_cls.code, "slug": rule_cls.slug, "reason": reason})
            continue
        if values_later and rule_cls.needs_values:
            deferred.append((len(per_rule), rule_cls))
            per_rule.append([])
            continue
        per_rule.append(list(rule_cls().check(ctx)))
    return per_rule, deferred


def _refuse_lone_shard(source) -> None:
    name = getattr(source, "single_file", None)
    if name is None:
        return
    index, _problem = read_index(source, INDEX_NAME) if (source.root / INDEX_NAME).is_file() else (None, None)
    shards = set(index.weight_map.values()) if index is not None else set()
    if name in shards and len(shards) > 1:
        raise TargetError(
            f"{source.label} is one shard of the sharded checkpoint in {source.root} ({INDEX_NAME} "
            f"names {len(shards)} shards); check or repair the folder: a shard alone would be judged "
            f"as a whole model"
        )


def doctor(
    path_or_repo: str | os.PathLike[str],
    *,
    runtime: str | None = None,
    hardware: str | Sequence[str] = (),
    headers_only: bool = False,
    deep: bool = False,
    revision: str | None = None,
    progress: bool | None = None,
    producer_schema: bool = False,
) -> Report:
    """Judge a checkpoint and return its report: what `ckpt doctor` prints, as an object.

    Call it right after `export_hf_checkpoint(...)` / `save_pretrained(...)` and refuse to upload on a failing
    report::

        report = ckpt_tools.doctor("./llama-nvfp4")
        if report.exit_code("error"):          # "warning" to be strict
            raise SystemExit(report.render("text"))

    Args:
        path_or_repo: a checkpoint folder, one `.safetensors` file, or a Hub repo id (`org/name`) where supported.
        runtime: runtime profile id from `rules/runtimes/` (default: the profile marked `default = true`).
        hardware: a hardware profile id or a list of them, any case, for kernel notes (default: every profile in
            `rules/hardware.toml`).
        headers_only: read headers only; rules that read scale values are listed in `report.skipped`.
        deep: on a remote target, also run the value scan (ranged reads of the scale tensors only).
        revision: Hub revision (branch, tag or commit) for a repo id.
        progress: show a progress bar for long scale scans (None: only when the scan is large).
        producer_schema: also validate the quantization config with the producer's own code (rule CK311; needs the
            `producers` extra and imports torch).

    Returns:
        The `Report` (`report.findings`, `report.summary`, `report.to_dict()` for the JSON contract,
        `report.exit_code(fail_on)`, `report.render(format)`).

    Raises:
        ckpt_tools.errors.CkptError: nothing to inspect (missing path, no safetensors file, unknown profile) or an
        argument of the wrong kind (`UsageError`). A checkpoint whose files are broken is not an exception: it is a
        report with findings.
    """
    from . import _inputs

    return analyze(
        _inputs.target(path_or_repo, "path_or_repo"),
        runtime=_inputs.optional_id(runtime, "runtime"),
        hardware_ids=_inputs.ids(hardware, "hardware"),
        headers_only=headers_only,
        deep=deep,
        revision=revision,
        progress=progress,
        producer_schema=producer_schema,
    ).report


def checkpoint_summary(ckpt: Checkpoint, det: Detection, chosen: Sequence[Hardware] = ()) -> dict:
    """The report's `checkpoint` object; kernel facts name the `chosen` GPUs (`--hardware`), else the runtime's."""
    from .kernels import kernel_facts, nvfp4_kernels, text_model_type

    model_type = text_model_type(ckpt.config)
    return {
        "producer": det.producer,
        "quant_algo": det.quant_algo,
        "vllm_quantization": det.vllm_quantization,
        "activation_mode": det.activation_mode,
        "architecture": ckpt.architecture,
        "model_type": ckpt.model_type,
        "shards": len(ckpt.shard_files),
        "tensors": len(ckpt.tensors),
        "bytes": ckpt.total_bytes,
        "kv_cache": det.kv_cache,
        "components": list(det.components),
        # additions beyond the contract's required fields
        "runtime": det.runtime.id,
        "family": det.family.id,
        "quant_config_source": det.config.source,
        "rejection": det.rejection,
        "made_by": det.made_by,
        "schemes": _scheme_counts(det),
        "disk_activation_mode": det.disk_activation_mode,
        "nvfp4_kernels": nvfp4_kernels(det, chosen, model_type),
        "kernels": kernel_facts(det, chosen, model_type),
    }


def _scheme_counts(det: Detection) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for row_class in det.classes:  # every row is in exactly one class, whose rows share the declared scheme
        counts[row_class.declared.label] += len(row_class.names)
    return dict(sorted(counts.items()))
