"""`fix-prefix`: rename tensors from one prefix to another in every shard header and in the index `weight_map`.

Without explicit pairs it applies the `misnested-prefix` finding's plan: the prefix pairs of its
`details["rename"]`. Names change; dtypes, shapes, offsets, `__metadata__` and every data byte do
not (safetensors src/tensor.rs, safetensors 0.8 (docs/reference/safetensors.md §8.2): "renaming keys is free").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import MappingProxyType

from ..errors import TargetError, UsageError
from ..model.checkpoint import Checkpoint
from ..pipeline import Analysis
from ..rules.ck201_misnested_prefix import MisnestedPrefix
from .edits import Plan, ShardEdit, nothing
from .runner import Job, fixable_findings

NAME = "fix-prefix"


def job(pairs: Sequence[tuple[str, str]] = ()) -> Job:
    """The fix-prefix job: the finding's plan, or explicit (old prefix, new prefix) pairs."""
    explicit = tuple(normalize(old, new) for old, new in pairs)

    def build(analysis: Analysis, target: str) -> Plan:
        if explicit:
            return explicit_plan(analysis.checkpoint, explicit)
        return finding_plan(analysis)

    return Job(NAME, MisnestedPrefix.slug, False, build)


def normalize(old: str, new: str) -> tuple[str, str]:
    """Prefixes end at a dot: `model.language_model.visual` and `model.language_model.visual.` are the same, and
    never match `model.language_model.visual_proj`. An empty NEW removes the prefix."""
    old = old.strip()
    new = new.strip()
    if not old.rstrip("."):
        raise UsageError("--from needs a non-empty prefix")
    old = old.rstrip(".") + "."
    new = new.rstrip(".") + "." if new.rstrip(".") else ""
    return old, new


def finding_plan(analysis: Analysis) -> Plan:
    """The renames the `misnested-prefix` findings carry (`details["rename"]`: from, to, count per prefix pair),
    applied to the tensor names as explicit pairs are; the rule is not run again."""
    findings = fixable_findings(analysis, MisnestedPrefix.slug)
    if not findings:
        return nothing(NAME, "no misnested-prefix finding: every tensor sits under a prefix the architecture loads")
    pairs = list(dict.fromkeys((step["from"], step["to"]) for f in findings for step in f.details.get("rename", ())))
    renames, counts = _renames(analysis.checkpoint, pairs)
    return _plan(analysis.checkpoint, renames, pairs, counts)


def explicit_plan(ckpt: Checkpoint, pairs: Sequence[tuple[str, str]]) -> Plan:
    renames, counts = _renames(ckpt, pairs)
    for pair in pairs:
        if pair not in counts:
            raise UsageError(f"no tensor name starts with `{pair[0]}`; `ckpt inspect TARGET -t '*'` lists them")
    return _plan(ckpt, renames, list(pairs), counts)


def _renames(ckpt: Checkpoint, pairs: Sequence[tuple[str, str]]) -> tuple[dict[str, str], dict[tuple[str, str], int]]:
    """(old name -> new name, tensors per pair) over the shard tensors; the first matching pair wins."""
    renames: dict[str, str] = {}
    counts: dict[tuple[str, str], int] = {}
    for name in _starting_with(ckpt.tensors, pairs):
        for old, new in pairs:
            if name.startswith(old):
                renames[name] = new + name[len(old) :]
                counts[(old, new)] = counts.get((old, new), 0) + 1
                break
    return renames, counts


def _starting_with(names: Iterable[str], pairs: Sequence[tuple[str, str]]) -> list[str]:
    """The names that start with some pair's old prefix, in their order."""
    olds = tuple(old for old, _new in pairs)
    return [name for name in names if name.startswith(olds)]


def _plan(
    ckpt: Checkpoint, renames: dict[str, str], pairs: list[tuple[str, str]], counts: dict[tuple[str, str], int]
) -> Plan:
    _check_collisions(ckpt, renames)
    edits = {file: ShardEdit(renames=MappingProxyType(mine)) for file, mine in _per_shard(ckpt, renames).items()}
    index_renames: dict[str, str] = {}
    if ckpt.index is not None:
        # Index keys follow the same prefixes, including keys of tensors the shards do not hold (a prefix rename
        # must not leave half of a component under the old name).
        for key in _starting_with(ckpt.index.weight_map, pairs):
            for old, new in pairs:
                if key.startswith(old):
                    index_renames[key] = new + key[len(old) :]
                    break
    elif renames:
        index_renames = dict(renames)  # no index here; the guard refuses a lone shard of a sharded checkpoint
    lines = tuple(f"`{old}` -> `{new or '(nothing)'}`: {counts.get((old, new), 0)} tensor(s)" for old, new in pairs)
    total = len(renames)
    return Plan(
        job=NAME,
        summary=f"rename {total} tensor(s) in {len(edits)} shard(s)",
        edits=MappingProxyType(edits),
        index_renames=MappingProxyType(index_renames),
        lines=lines,
        details={"rename": [{"from": o, "to": n, "count": counts.get((o, n), 0)} for o, n in pairs]},
    )


def _per_shard(ckpt: Checkpoint, renames: dict[str, str]) -> dict[str, dict[str, str]]:
    """Shard file -> (old name -> new name) of the renamed tensors it holds, in header order, shards in their order:
    stray and unreadable shards included (a copy of a renamed tensor there is renamed too)."""
    out: dict[str, dict[str, str]] = {}
    for shard in ckpt.shards:
        mine = {t.name: renames[t.name] for t in shard.tensors if t.name in renames}
        if mine:
            out[shard.name] = mine
    return out


def _check_collisions(ckpt: Checkpoint, renames: dict[str, str]) -> None:
    targets: dict[str, str] = {}
    for old, new in renames.items():
        if new in targets:
            raise UsageError(f"`{old}` and `{targets[new]}` would both become `{new}`; nothing was changed")
        if new in ckpt.tensors and new not in renames:
            raise TargetError(
                f"renaming `{old}` to `{new}` would collide with an existing tensor; nothing was "
                f"changed (rename or drop the other one first)"
            )
        targets[new] = old
