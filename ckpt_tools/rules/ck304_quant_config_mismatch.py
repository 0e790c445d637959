from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from itertools import chain
from typing import Any

from ..detect.resolve import RowClass
from ..model.modules import COMPRESSED_TENSORS_SUFFIXES
from .base import Context, Finding, Rule, files_of, module_files, register

MODELOPT_NVFP4 = {"weight_scale_2", "input_scale"}
_CT_FOREIGN = frozenset({*MODELOPT_NVFP4, "weight"})  # under compressed-tensors, a plain `weight` is foreign too


def _clip(pattern: str) -> str:
    return pattern if len(pattern) <= 80 else pattern[:80] + "..."


def _nested(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    q = cfg.get("quantization")
    return q if isinstance(q, dict) else cfg


def _entries(value: Any) -> set[str]:
    return {e for e in value if isinstance(e, str)} if isinstance(value, list) else set()


def _kv_word(value: Any) -> str | None:
    if isinstance(value, dict):
        return f"{value.get('type')}{value.get('num_bits')}".replace("float8", "fp8").replace("float4", "nvfp4")
    return value.lower() if isinstance(value, str) else None


def _listed(entries: set[str]) -> str:
    extra = sorted(entries)
    if not extra:
        return "nothing of its own"
    return ", ".join(f"`{e}`" for e in extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")


@register
class QuantConfigMismatch(Rule):
    """config.json, hf_quant_config.json and the tensors disagree about the quantization.

    What it catches
    - config.json `quantization_config` and hf_quant_config.json naming different algos or exclude lists (vLLM
      reads config.json and ignores the other file: vllm/transformers_utils/config.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.1); KV-cache disagreements are CK303);
    - a declared quantization with no quantized tensor at all, or quantized tensors with no declaration;
    - modules whose tensors are a different scheme from the one the config gives them (e.g. FP8 tensors under an
      NVFP4 config), or use the other producer's tensor names (`weight_scale_2` under compressed-tensors,
      `weight_packed` under ModelOpt);
    - a regex of the config (a `re:` ignore / targets entry, a GPTQ `dynamic` key, a Quark exclude) that does not
      finish matching the module names within ckpt's time budget (a ReDoS pattern such as `re:([\\w.]+)+Z`);
    - compressed-tensors NVFP4A16 (`input_activations: null`) linears that still carry `input_global_scale`, and
      ModelOpt NVFP4 configs whose groups all have null input activations although the tensors have input scales
      (vLLM silently downgrades them to W4A16).

    Why it matters
    vLLM builds parameters from the config, then loads tensors by name: a disagreement either fails at load ("There
    is no module or parameter named ...") or, worse, loads into the wrong layout and serves garbage.

    Anti-pattern
    Hand-editing config.json after quantization, copying a config from a sibling checkpoint, or converting between
    producers by renaming tensors.

    Fix
    Make config.json's `quantization_config` describe the tensors (regenerate it with the producer), and keep
    hf_quant_config.json consistent with it or delete it.
    """

    code = "CK304"
    slug = "quant-config-mismatch"
    severity = "error"
    title = "Quantization configs and tensors disagree"

    def check(self, ctx: Context) -> Iterable[Finding]:
        yield from self._slow_patterns(ctx)
        yield from self._configs_disagree(ctx)
        yield from self._declared_vs_disk(ctx)

    def _slow_patterns(self, ctx: Context) -> Iterable[Finding]:
        slow = ctx.det.slow_patterns
        if not slow:
            return
        shown = "; ".join(f"`{_clip(p)}`: {why}" for p, why in sorted(slow.items())[:3])
        yield self.finding(
            f"{len(slow)} regex(es) of the quantization config could not be matched against the module names within "
            f"ckpt's time budget ({shown}). vLLM matches them with the same backtracking engine (Python `re`) for "
            f"every module while it builds the model, so it would stall loading this checkpoint; ckpt judged the "
            f"checkpoint as if they matched nothing. Rewrite them without nested repetition (`re:.*mlp\\.gate$` "
            f"instead of `re:(.*\\.)+gate$`), or list the modules by name.",
            files=(ctx.det.config.file,) if ctx.det.config.file else (),
            count=len(slow),
            details={"patterns": dict(sorted(slow.items()))},
        )

    def _configs_disagree(self, ctx: Context) -> Iterable[Finding]:
        cfg = (ctx.ckpt.config or {}).get("quantization_config")
        hfq = ctx.ckpt.hf_quant_config
        if not isinstance(cfg, dict) or not isinstance(hfq, dict):
            return
        nested = _nested(hfq)
        diffs = []
        a, b = str(cfg.get("quant_algo") or "").upper(), str(nested.get("quant_algo") or "").upper()
        if cfg.get("quant_method") == "modelopt" or a:
            if a != b:
                diffs.append(("quant_algo", a or None, b or None, "error"))
        else:
            diffs.append(("quant_method", cfg.get("quant_method"), "modelopt", "error"))
        for what, x, y, severity in diffs:
            yield self.finding(
                f"config.json says {what} = {x or '(none)'}, hf_quant_config.json says {y or '(none)'}; vLLM uses "
                f"config.json and ignores hf_quant_config.json. Make them agree.",
                files=["config.json", "hf_quant_config.json"],
                count=1,
                severity=severity,
                details={"field": what, "config.json": x, "hf_quant_config.json": y},
            )
        # KV-cache declarations that disagree are kv-cache-config-mismatch's (CK303).
        ex_a = _entries(cfg.get("ignore") or cfg.get("exclude_modules"))
        ex_b = _entries(nested.get("exclude_modules") or nested.get("ignore"))
        if ex_a != ex_b:
            # Name the entries that differ: two lists of the same length are the common case.
            yield self.finding(
                f"config.json and hf_quant_config.json have different exclude lists (only in config.json: "
                f"{_listed(ex_a - ex_b)}; only in hf_quant_config.json: {_listed(ex_b - ex_a)}); vLLM uses config.json "
                f"and ignores hf_quant_config.json. Make them agree.",
                files=["config.json", "hf_quant_config.json"],
                count=1,
                severity="warning",
                details={"field": "exclude list", "config.json": sorted(ex_a), "hf_quant_config.json": sorted(ex_b)},
            )

    def _declared_vs_disk(self, ctx: Context) -> Iterable[Finding]:
        source = ctx.det.config.source or "config.json"
        # The three whole-checkpoint disagreements exclude one another and the per-module ones: the first that
        # fires is the finding.
        for whole in (self._nothing_quantized, self._nothing_declared, self._config_quantizes_none):
            finding = whole(ctx, source)
            if finding is not None:
                yield finding
                return
        # Judged per row class (Detection.classes): every verdict below reads the row's schemes and its module's
        # tensor suffixes, which the members of a class share (one layout); the members are named afterwards.
        declared_q = [c for c in ctx.det.classes if c.declared.quantized]
        yield from self._kind_mismatch(ctx, declared_q, source)
        yield from self._naming(ctx, declared_q, source)
        yield from self._activation_config(ctx, source)

    def _nothing_quantized(self, ctx: Context, source: str) -> Finding | None:
        det, classes = ctx.det, ctx.det.classes
        if (
            det.config.data is None
            or det.rejection is not None
            or not classes
            or any(c.disk.quantized for c in classes)
            # Integer weights in no layout the detector knows (packed FP4 beside F32 scales) are quantized tensors
            # with something wrong: scale-shape-mismatch names what, and "no tensor is quantized" would be false.
            or any(c.disk.kind == "unknown" for c in classes)
        ):
            return None
        # The classes come sorted by first member: the first holds the first row.
        return self.finding(
            f"{source} declares {det.quant_method} quantization ({det.quant_algo or 'no algo'}) but no tensor is "
            f"quantized: every linear weight is {classes[0].disk.label}. Remove the quantization_config or export "
            f"the quantized weights.",
            files=[det.config.file],
            count=len(det.rows),
        )

    def _nothing_declared(self, ctx: Context, source: str) -> Finding | None:
        disk_q = [c for c in ctx.det.classes if c.disk.quantized]
        if ctx.det.config.data is not None or not disk_q:
            return None
        names = _names(disk_q)
        return self.finding(
            f"{len(names)} module(s) hold quantized tensors ({disk_q[0].disk.label}) but neither config.json nor "
            f"hf_quant_config.json declares a quantization: vLLM loads the model as unquantized and fails on the "
            f"first quantized tensor. Add the producer's quantization_config.",
            tensors=names,
            files=files_of(ctx.ckpt, (f"{n}.{s}" for n in names for s in ctx.ckpt.modules[n].tensors))
            | {"config.json"},
        )

    def _config_quantizes_none(self, ctx: Context, source: str) -> Finding | None:
        """A config is present but quantizes nothing: empty or malformed `config_groups`, or an ignore / exclude list
        that covers every module. ignore-list-mismatch (CK301) stands aside when nothing is declared."""
        det = ctx.det
        disk_q = [c for c in det.classes if c.disk.quantized]
        if (
            not disk_q
            or any(c.declared.quantized for c in det.classes)
            or det.rejection is not None
            or not (det.producer in ("compressed-tensors", "modelopt") or det.quant_method == "fp8")
        ):
            return None
        names = _names(disk_q)
        groups = (det.config.data or {}).get("config_groups")
        if det.producer == "compressed-tensors" and not (isinstance(groups, dict) and groups):
            why = f"`config_groups` is {'empty' if not groups else 'not an object'}"
        else:
            covered = sorted({c.covered_by for c in disk_q if c.covered_by})
            why = (
                f"covered by {', '.join(f'`{c}`' for c in covered[:3])}"
                if covered
                else "no config group quantizes them"
            )
        return self.finding(
            f"{len(names)} module(s) hold quantized tensors ({disk_q[0].disk.label}) but {source} quantizes none "
            f"of them ({why}): vLLM builds every layer unquantized and fails on the first quantized tensor "
            f"(\"There is no module or parameter named ...\"). Regenerate the quantization_config with the "
            f"producer.",
            tensors=names,
            files=module_files(ctx.ckpt, names) | {det.config.file},
        )

    def _kind_mismatch(self, ctx: Context, declared_q: list[RowClass], source: str) -> Iterable[Finding]:
        kinds: dict[tuple[str, str], list[RowClass]] = defaultdict(list)
        for c in declared_q:
            if (
                c.disk.quantized
                and c.disk.kind != c.declared.kind
                and not ({c.disk.kind, c.declared.kind} <= {"int4", "int8"})
            ):
                kinds[(c.declared.label, c.disk.label)].append(c)
        for (want, have), classes in sorted(kinds.items()):
            names = _names(classes)
            yield self.finding(
                f"{len(names)} module(s) are declared {want} by {source} but their tensors are {have}; vLLM will build "
                f"{want} parameters and fail or load garbage. Regenerate the quantization_config with the producer.",
                tensors=names,
                files=module_files(ctx.ckpt, names) | {ctx.det.config.file},
            )

    def _naming(self, ctx: Context, declared_q: list[RowClass], source: str) -> Iterable[Finding]:
        producer = ctx.det.producer
        # The other producer's names: a module carrying any of them is named wrongly (tested once per class: its
        # members share the layout, so the suffixes).
        foreign = {"compressed-tensors": _CT_FOREIGN, "modelopt": COMPRESSED_TENSORS_SUFFIXES}.get(producer)
        if foreign is None:
            return
        modules = ctx.ckpt.modules
        wrong = _names(
            [
                c
                for c in declared_q
                if c.declared.kind == "nvfp4"
                and c.disk.kind == "nvfp4"
                and not modules[c.names[0]].tensors.keys().isdisjoint(foreign)
            ]
        )
        if wrong:
            other = "ModelOpt" if producer == "compressed-tensors" else "compressed-tensors"
            yield self.finding(
                f"{len(wrong)} NVFP4 module(s) use {other} tensor names under a {producer} config (e.g. "
                f"{', '.join(sorted(ctx.ckpt.modules[wrong[0]].tensors))}); vLLM has no parameter for them. Convert "
                f"the checkpoint with the producer's own tooling instead of renaming tensors.",
                tensors=wrong,
                files=module_files(ctx.ckpt, wrong) | {ctx.det.config.file},
            )

    def _activation_config(self, ctx: Context, source: str) -> Iterable[Finding]:
        det = ctx.det
        if det.producer == "compressed-tensors":
            extra = _names(
                [
                    c
                    for c in det.classes
                    if c.declared.kind == "nvfp4"
                    and c.declared.activation == "A16"
                    and not c.is_expert
                    and "input_global_scale" in ctx.ckpt.modules[c.names[0]].tensors
                ]
            )
            if extra:
                yield self.finding(
                    f"{len(extra)} linear(s) are declared NVFP4A16 (input_activations: null) but carry "
                    f"`input_global_scale`; vLLM's weight-only NVFP4 layer has no such parameter. Either declare NVFP4 "
                    f"input activations (W4A4, faster on Blackwell) or drop the tensors.",
                    tensors=extra,
                    files=module_files(ctx.ckpt, extra) | {ctx.det.config.file},
                )
        elif det.producer == "modelopt":
            downgraded = _names(
                [
                    c
                    for c in det.classes
                    if c.declared.kind == "nvfp4"
                    and c.declared.detail
                    and c.declared.detail.startswith("downgraded")
                    and c.disk.activation == "A4"
                ]
            )
            if downgraded:
                yield self.finding(
                    f"quant_algo is NVFP4 but every config group has `input_activations: null`, so vLLM silently "
                    f"serves it as W4A16_NVFP4 although {len(downgraded)} module(s) carry input scales. Restore the "
                    f"input_activations in {source} to run W4A4.",
                    tensors=downgraded,
                    files={ctx.det.config.file},
                    severity="warning",
                )


def _names(classes: list[RowClass]) -> list[str]:
    """The members of these row classes, in row (name) order."""
    return sorted(chain.from_iterable(c.names for c in classes))
