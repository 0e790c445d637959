"""The one function that turns a load accounting into findings, whichever judge produced it (the load model or
vLLM's own loader under `ckpt doctor --vllm`): the same codes, slugs and wording for both.

| code  | slug                     | from the accounting                                                        |
|-------|--------------------------|----------------------------------------------------------------------------|
| CK601 | tensor-without-parameter | a fatal tensor with no parameter to go into                                |
| CK602 | parameter-unfilled       | a parameter (or part of a fused one) no tensor fills, unless it has a default |
| CK603 | load-shape-mismatch      | a tensor whose shape or packing does not fit its parameter (raised or narrowed) |
| CK604 | load-dtype-cast          | a tensor copied into a parameter of another kind (float into integer)      |
| CK605 | model-build-failed       | the model class (or one layer) could not be built                          |
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from ..load.accounting import LoadAccounting, ParameterFill, TensorFate, is_exempt
from .base import MAX_LISTED_TENSORS, Finding, find_rule

# The CK60x rules apply this function (through _load_model), so it names them by code and takes their slug and
# severity from the registry.
LoadCode = str
TENSOR_WITHOUT_PARAMETER: LoadCode = "CK601"
PARAMETER_UNFILLED: LoadCode = "CK602"
LOAD_SHAPE_MISMATCH: LoadCode = "CK603"
LOAD_DTYPE_CAST: LoadCode = "CK604"
MODEL_BUILD_FAILED: LoadCode = "CK605"
LOAD_CODES = (TENSOR_WITHOUT_PARAMETER, PARAMETER_UNFILLED, LOAD_SHAPE_MISMATCH, LOAD_DTYPE_CAST, MODEL_BUILD_FAILED)

# vLLM's words when a name reaches no parameter: AutoWeightsLoader's ValueError, and the AttributeError a fused
# loader raises when a stacked name lands on the module instead of a parameter (docs/reference/load-model.md).
_NO_PARAMETER = re.compile(r"There is no module or parameter named|object has no attribute|KeyError")
# Parameters vLLM fills with a default when no tensor does: the attention layer's KV-cache scales and zero points
# (vllm/model_executor/layers/attention/attention.py, vLLM 0.33.0).
_MAX_GROUPS = 8  # findings per code: one per distinct reason, the rest folded into the last


def findings(acc: LoadAccounting, files: Callable[[Iterable[str]], Iterable[str]] | None = None) -> list[Finding]:
    """Every CK60x finding the accounting supports, in code order. `files` names the shards holding some tensors
    (for the findings' `files`); without it findings name no file."""
    out = _findings(acc)
    if files is None:
        return out
    return [replace(f, files=tuple(sorted(set(files(f.all_tensors))))) for f in out]


def _findings(acc: LoadAccounting) -> list[Finding]:
    if acc.build_error is not None:
        return [_finding(MODEL_BUILD_FAILED, _build_message(acc), (), {"error": acc.build_error}, acc)]
    by_problem: dict[LoadCode, list[TensorFate]] = {c: [] for c in LOAD_CODES[:4]}
    for fate in acc.tensors:
        if fate.owner is not None:
            continue
        code = _tensor_code(fate)
        if code is not None:
            by_problem[code].append(fate)
    out: list[Finding] = []
    out += _grouped(TENSOR_WITHOUT_PARAMETER, by_problem[TENSOR_WITHOUT_PARAMETER], acc, _no_parameter_message)
    out += _unfilled(acc)
    out += _grouped(LOAD_SHAPE_MISMATCH, by_problem[LOAD_SHAPE_MISMATCH], acc, _shape_message)
    out += _grouped(LOAD_DTYPE_CAST, by_problem[LOAD_DTYPE_CAST], acc, _cast_message)
    return out


def _tensor_code(fate: TensorFate) -> LoadCode | None:
    if fate.problem == "no-parameter":
        return TENSOR_WITHOUT_PARAMETER
    if fate.problem == "shape":
        return LOAD_SHAPE_MISMATCH
    if fate.problem == "dtype-cast":
        return LOAD_DTYPE_CAST
    if fate.fate != "fatal":
        return None
    return TENSOR_WITHOUT_PARAMETER if _NO_PARAMETER.search(fate.error or "") else LOAD_SHAPE_MISMATCH


def _grouped(
    code: LoadCode,
    fates: Sequence[TensorFate],
    acc: LoadAccounting,
    message: Callable[[str, Sequence[TensorFate], LoadAccounting], str],
) -> list[Finding]:
    """One finding per distinct reason (the same cause on many layers is one finding), at most `_MAX_GROUPS`."""
    groups: dict[str, list[TensorFate]] = {}
    for fate in fates:
        groups.setdefault(fate.reason or fate.error or "", []).append(fate)
    keys = list(groups)
    if len(keys) > _MAX_GROUPS:
        rest = [f for k in keys[_MAX_GROUPS - 1 :] for f in groups.pop(k)]
        groups[keys[_MAX_GROUPS - 1]] = rest
    out = []
    for reason, members in groups.items():
        details = {
            "judge": _judge(acc),
            "tensors": {f.tensor: _fate_detail(f) for f in members[:200]},
        }
        out.append(_finding(code, message(reason, members, acc), [f.tensor for f in members], details, acc))
    return out


def _unfilled(acc: LoadAccounting) -> list[Finding]:
    fills = [p for p in acc.parameters if (not p.filled or p.partial) and not is_exempt(p) and p.owner is None]
    if not fills:
        return []
    groups: dict[str, list[ParameterFill]] = {}
    for p in fills:
        groups.setdefault(p.note, []).append(p)
    out = []
    for note, members in groups.items():
        names = [_label(p) for p in members]
        first = members[0]
        what = note or "the layer computes with whatever `torch.empty` left in its memory"
        message = (
            f"{len(members)} parameter(s) vLLM builds are never filled by any tensor (e.g. `{_label(first)}`): "
            f"{what}. {_judged(acc)} Store the missing tensor(s) under the names the loader expects, or declare "
            "the layer unquantized in the config if it is stored unquantized."
        )
        details = {
            "judge": _judge(acc),
            "parameters": {
                p.parameter: {
                    "shape": None if p.shape is None else list(p.shape),
                    "dtype": p.dtype,
                    "partial": list(p.partial),
                }
                for p in members[:200]
            },
        }
        out.append(_finding(PARAMETER_UNFILLED, message, names, details, acc))
    return out


def _label(p: ParameterFill) -> str:
    return f"{p.parameter} [{', '.join(p.partial)}]" if p.partial else p.parameter


def _no_parameter_message(reason: str, fates: Sequence[TensorFate], acc: LoadAccounting) -> str:
    first = fates[0]
    error = f" vLLM raises `{first.error}`." if first.error else ""
    why = f" {reason.rstrip('.')}." if reason and reason != first.error else ""
    return (
        f"{len(fates)} tensor(s) have no parameter to load into (e.g. `{first.tensor}`), so the load fails.{error}"
        f"{why} {_judged(acc)} Declare these modules in the quantization config the way the tensors are stored, or "
        "store the tensors under the names vLLM builds."
    )


def _shape_message(reason: str, fates: Sequence[TensorFate], acc: LoadAccounting) -> str:
    first = fates[0]
    raised = [f for f in fates if f.fate == "fatal"]
    errors = [f.error for f in raised if f.error]
    outcome = f"vLLM raises `{errors[0]}`" if errors else "the load fails" if raised else "vLLM narrows it silently"
    why = f" {reason.rstrip('.')}." if reason and reason != first.error else ""
    return (
        f"{len(fates)} tensor(s) do not fit the shape of the parameter vLLM builds for them (e.g. `{first.tensor}`): "
        f"{outcome}.{why} {_judged(acc)} Make the config's quantization arguments (bits, group size, strategy) "
        "match the tensors, or re-export the checkpoint."
    )


def _cast_message(reason: str, fates: Sequence[TensorFate], acc: LoadAccounting) -> str:
    first = fates[0]
    why = f": {reason.rstrip('.')}" if reason else ""
    return (
        f"{len(fates)} tensor(s) are copied into parameters of another kind without an error (e.g. "
        f"`{first.tensor}`){why}. torch converts the raw numbers, so the layer computes with values that mean "
        f"nothing in its format. {_judged(acc)} Store the tensors in the dtype the scheme defines, or declare the "
        "layer unquantized."
    )


def _build_message(acc: LoadAccounting) -> str:
    arch = f" {acc.architecture}" if acc.architecture else ""
    return (
        f"vLLM cannot build the model{arch}: {acc.build_error}. {_judged(acc)} Nothing loads until the config or "
        "the layer it names is changed."
    )


def _judged(acc: LoadAccounting) -> str:
    if acc.judge == "vllm":
        return f"(judged by {acc.judged_by}'s own loader.)"
    return f"(load model of {acc.judged_by}: docs/reference/load-model.md.)"


def _judge(acc: LoadAccounting) -> dict[str, Any]:
    return {"judge": acc.judge, "judged_by": acc.judged_by}


def _fate_detail(f: TensorFate) -> dict[str, Any]:
    out: dict[str, Any] = {"fate": f.fate}
    for key in ("parameter", "shard", "error", "problem"):
        value = getattr(f, key)
        if value is not None:
            out[key] = value
    if f.reason:
        out["reason"] = f.reason
    return out


def _finding(
    code: LoadCode, message: str, tensors: Iterable[str], details: dict[str, Any], acc: LoadAccounting
) -> Finding:
    listed = tuple(tensors)
    rule = find_rule(code)
    assert rule is not None, code
    return Finding(
        code=rule.code,
        slug=rule.slug,
        severity=rule.severity,
        message=message,
        tensors=listed[:MAX_LISTED_TENSORS],
        count=len(listed),
        details=MappingProxyType(details),
        all_tensors=listed,
    )
