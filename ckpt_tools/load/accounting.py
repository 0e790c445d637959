"""The accounting vocabulary: every checkpoint tensor's fate and every vLLM parameter's fill, as plain frozen data
that crosses a process boundary as JSON (the `--vllm` subprocess writes it, the parent reads it)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

Fate = Literal["loaded", "skipped", "fatal"]
Judge = Literal["model", "vllm"]
# What is wrong with a tensor's load, when the judge can say: no parameter to go into, a shape that does not fit
# (vLLM raises, or narrows it silently), or a cross-kind dtype cast (a float tensor copied into an integer parameter).
Problem = Literal["no-parameter", "shape", "dtype-cast"]


@dataclass(frozen=True)
class TensorFate:
    """What the loader does with one checkpoint tensor.

    `loaded`: copied into `parameter` (the vLLM parameter name, e.g. `model.layers.0.self_attn.qkv_proj.weight`,
    with `shard` the stacked shard id such as `q` or expert id where it fills part of a fused parameter).
    `skipped`: never looked at, with `reason` (the mapper drops it, the loader ignores the name on purpose).
    `fatal`: the load raises; `error` is vLLM's exception as `Type: text`, `reason` says why in our words.
    `problem` classifies a fatal or silently wrong load (`Problem`); a fatal fate without one is read from its
    error text (rules/_load_findings.py). `owner` is the slug of the catalogue rule that already reports this defect
    precisely (e.g. `ignore-list-mismatch`): the load findings leave it to that rule, so a defect gets one verdict.
    """

    tensor: str
    fate: Fate
    parameter: str | None = None
    shard: str | None = None
    reason: str = ""
    error: str | None = None
    problem: Problem | None = None
    owner: str | None = None


@dataclass(frozen=True)
class ParameterFill:
    """One parameter vLLM registers, and whether any tensor fills it.

    An unfilled parameter keeps `torch.empty` memory (or a default the loader sets, `default` says which): `note`
    says what the layer computes with it. `partial` lists the parts of a fused / stacked parameter that no tensor
    filled (`k`, `v`, expert ids...). `owner` as for `TensorFate`.
    """

    parameter: str
    shape: tuple[int, ...] | None
    dtype: str | None
    filled: bool
    partial: tuple[str, ...] = ()
    default: str | None = None
    note: str = ""
    owner: str | None = None


@dataclass(frozen=True)
class LoadAccounting:
    """The whole load of one checkpoint under one runtime.

    `judge` is who produced it: the load model (`model`) or vLLM's own code (`vllm`, with `judged_by` naming the
    installed version). `build_error` is set when the model class could not be built at all (config rejected, a
    layer vLLM cannot construct on this platform); `tensors` and `parameters` are then empty.
    """

    judge: Judge
    judged_by: str
    architecture: str | None
    tensors: tuple[TensorFate, ...] = ()
    parameters: tuple[ParameterFill, ...] = ()
    build_error: str | None = None

    def with_owners_of(self, other: LoadAccounting) -> LoadAccounting:
        """This accounting with the `owner` of every tensor and parameter `other` marks (by name): how vLLM's own
        accounting takes the load model's attribution to catalogue rules, so `findings` leaves the same defects to
        them whichever judge made it."""
        tensors = {t.tensor: t.owner for t in other.tensors if t.owner}
        params = {p.parameter: p.owner for p in other.parameters if p.owner}
        return replace(
            self,
            tensors=tuple(replace(t, owner=tensors[t.tensor]) if t.tensor in tensors else t for t in self.tensors),
            parameters=tuple(
                replace(p, owner=params[p.parameter]) if p.parameter in params else p for p in self.parameters
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "judged_by": self.judged_by,
            "architecture": self.architecture,
            "build_error": self.build_error,
            "tensors": [_fate_dict(t) for t in self.tensors],
            "parameters": [_fill_dict(p) for p in self.parameters],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadAccounting:
        return cls(
            judge=data["judge"],
            judged_by=str(data["judged_by"]),
            architecture=data.get("architecture"),
            build_error=data.get("build_error"),
            tensors=tuple(TensorFate(**t) for t in data.get("tensors", ())),
            parameters=tuple(
                ParameterFill(
                    **{
                        **p,
                        "shape": None if p.get("shape") is None else tuple(p["shape"]),
                        "partial": tuple(p.get("partial", ())),
                    }
                )
                for p in data.get("parameters", ())
            ),
        )


def _fate_dict(t: TensorFate) -> dict[str, Any]:
    return {
        "tensor": t.tensor,
        "fate": t.fate,
        "parameter": t.parameter,
        "shard": t.shard,
        "reason": t.reason,
        "error": t.error,
        "problem": t.problem,
        "owner": t.owner,
    }


def _fill_dict(p: ParameterFill) -> dict[str, Any]:
    return {
        "parameter": p.parameter,
        "shape": None if p.shape is None else list(p.shape),
        "dtype": p.dtype,
        "filled": p.filled,
        "partial": list(p.partial),
        "default": p.default,
        "note": p.note,
        "owner": p.owner,
    }


# vLLM fills these attention parameters with defaults when the checkpoint has no KV-cache scales.
_KV_DEFAULTS = re.compile(r"\.attn\.(?:[kvq]_scale|[kvq]_zero_point|prob_scale|kv_scale)$")


def is_exempt(fill: ParameterFill) -> bool:
    """An unfilled parameter that is no defect: vLLM gives it a default (KV-cache scales), or the layer never reads
    it (`default` set by the judge, e.g. the input scales a weight-only NVFP4 layer registers)."""
    return fill.default is not None or bool(_KV_DEFAULTS.search(fill.parameter))
