"""One verdict from two judges: under `ckpt doctor --vllm`, vLLM's own accounting replaces the load model's as the
input of the CK60x findings (rules/_load_findings.py), so nothing is reported twice and vLLM wins where both speak.

What the load model still contributes is who reports a defect: where it hands a tensor or parameter to a catalogue
rule that names the defect more precisely (`owner`, e.g. ignore-list-mismatch, scale-shape-mismatch), vLLM's entry
for the same tensor or parameter keeps that owner, and the CK60x findings leave it to the rule. A parameter vLLM
leaves unfilled because the tensor meant for it sits in a shard that is missing or unreadable is left to that shard's
own finding (index-missing-shard, invalid-header...): the dry run does not read those shards, a real load would stop
on them first. Everything vLLM reports that the model does not, it reports under its own name; everything the model
reports that vLLM does not is dropped (the conformance run, bench/conformance/load_agree.py, lists both kinds).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import replace
from types import MappingProxyType

from ..load.accounting import LoadAccounting
from ..rules.ck102_index_missing_shard import IndexMissingShard
from ..rules.ck201_misnested_prefix import MisnestedPrefix

SHARD_OWNER = IndexMissingShard.slug
MOVED_OWNER = MisnestedPrefix.slug


def combined(
    model: LoadAccounting,
    vllm: LoadAccounting,
    unavailable: Set[str] = frozenset(),
    moved: Mapping[str, str] = MappingProxyType({}),
) -> LoadAccounting:
    """vLLM's accounting with the load model's owners carried onto the same tensors and parameters. `moved`: tensors
    stored under another component's root -> the name they belong under (misnested-prefix, CK201, reports them and
    their fix): vLLM's error on such a tensor, and the parameter left unfilled where it belongs, are that rule's."""
    if vllm.build_error is not None:
        return vllm
    fate_owner = {t.tensor: t.owner for t in model.tensors if t.owner}
    fate_owner.update(dict.fromkeys(moved, MOVED_OWNER))
    belongs = {tail for name in moved.values() for tail in _tails(name)}
    fill_owner = {_same(p.parameter): p.owner for p in model.parameters if p.owner}
    # The load model counts a tensor of an unreadable shard as present; where it fills a parameter vLLM leaves
    # unfilled, and such tensors exist, that shard is the cause.
    behind_missing = {_same(p.parameter) for p in model.parameters if p.filled} if unavailable else set()
    tensors = tuple(
        replace(t, owner=fate_owner[t.tensor]) if t.owner is None and t.tensor in fate_owner else t
        for t in vllm.tensors
    )
    parameters = tuple(
        replace(p, owner=_fill_owner(p.parameter, fill_owner, behind_missing, belongs)) if p.owner is None else p
        for p in vllm.parameters
    )
    return replace(vllm, tensors=tensors, parameters=parameters)


def _fill_owner(parameter: str, owners: Mapping[str, str], behind_missing: Set[str], belongs: Set[str]) -> str | None:
    name = _same(parameter)
    if name in owners:
        return owners[name]
    if name in behind_missing:
        return SHARD_OWNER
    # The parameter a moved tensor would fill: vLLM's name is a tail of the name the tensor belongs under
    # (`visual.blocks.0.attn.proj.weight` for `model.visual.blocks.0.attn.proj.weight`).
    return MOVED_OWNER if name in belongs else None


def _tails(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[i:]) for i in range(len(parts))]


def _same(parameter: str) -> str:
    """A parameter name as both judges spell it: vLLM 0.33's fused MoE layer keeps its expert parameters in a
    `routed_experts` submodule (`mlp.experts.routed_experts.w13_weight`), the load model names them on the experts
    layer (`mlp.experts.w13_weight`)."""
    return parameter.replace(".routed_experts.", ".")
