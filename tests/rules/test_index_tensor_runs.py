"""CK103's proof that every loaded tensor is indexed to its own shard, taken from the index's runs of one shard
(`_by_runs`), gives exactly the verdict of a lookup per tensor, whatever the index's order: shard by shard, shards
reversed, sorted by name (runs interleaved), with one tensor mapped to the wrong shard, a name missing, a name too
many (at the end or inside a run), two names swapped between shards, a shard the index never names, a name mapped
to a shard that does not load."""

from __future__ import annotations

import random
from types import MappingProxyType

import pytest

from ckpt_tools.model.checkpoint import Checkpoint
from ckpt_tools.model.tensors import Index, Shard, TensorInfo
from ckpt_tools.rules import ck103_index_tensor_mismatch as ck103

SHARDS = [f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)]


def _checkpoint(weight_map: dict[str, str]) -> Checkpoint:
    shards = []
    for s, shard in enumerate(SHARDS):
        names = [f"model.layers.{s}.mlp.experts.{e}.{p}.weight" for e in range(6) for p in ("gate", "up", "down")]
        tensors = tuple(TensorInfo(n, "BF16", (2,), shard, 4 * i, 4 * i + 4) for i, n in enumerate(names))
        shards.append(Shard(shard, 8 + 2 + 4 * len(tensors), 2, None, tensors, True))
    return Checkpoint(
        target="t",
        remote=False,
        files={s.name: s.size for s in shards},
        shard_files=tuple(SHARDS),
        shards=tuple(shards),
        index=Index("model.safetensors.index.json", MappingProxyType(weight_map)),
    )


def _grouped() -> dict[str, str]:
    return {t.name: s.name for s in _checkpoint({}).shards for t in s.tensors}


def _reference(ckpt: Checkpoint) -> bool:
    assert ckpt.index is not None
    weight_map = ckpt.index.weight_map
    return all(weight_map.get(t.name) == s.name for s in ckpt.loaded_shards for t in s.tensors)


def _edits() -> dict[str, dict[str, str]]:
    grouped = _grouped()
    names = list(grouped)
    rng = random.Random(3)
    shuffled = names[:]
    rng.shuffle(shuffled)
    misplaced = dict(grouped)
    misplaced[names[20]] = SHARDS[3]
    missing = dict(grouped)
    del missing[names[40]]
    extra = {**grouped, "lm_head.weight": SHARDS[0]}
    swapped = dict(grouped)
    swapped[names[3]], swapped[names[30]] = grouped[names[30]], grouped[names[3]]  # two shards, one name each
    inside = {**dict(list(grouped.items())[:9]), "lm_head.weight": SHARDS[0], **dict(list(grouped.items())[9:])}
    no_last = {n: s for n, s in grouped.items() if s != SHARDS[3]}
    elsewhere = dict(grouped)
    elsewhere[names[5]] = "model-00009-of-00009.safetensors"
    return {
        "shard by shard": grouped,
        "shards reversed": dict(sorted(grouped.items(), key=lambda kv: -SHARDS.index(kv[1]))),
        "sorted by name": dict(sorted(grouped.items())),
        "shuffled": {n: grouped[n] for n in shuffled},
        "one misplaced": misplaced,
        "one missing": missing,
        "one too many": extra,
        "one too many inside a run": inside,
        "two swapped": swapped,
        "a shard never named": no_last,
        "mapped to a shard that does not load": elsewhere,
    }


EDITS = _edits()


@pytest.mark.parametrize("case", sorted(EDITS))
@pytest.mark.parametrize("runs_at_most", [0.0, 1 / 16, 1.0], ids=["lookups", "default", "always-runs"])
def test_runs_give_the_lookup_verdict(case: str, runs_at_most: float, monkeypatch) -> None:
    monkeypatch.setattr(ck103, "_RUNS_AT_MOST", runs_at_most)
    ckpt = _checkpoint(EDITS[case])
    want = _reference(ckpt)
    assert ck103._all_where_indexed(ckpt) == want
    holds = (
        "shard by shard",
        "shards reversed",
        "sorted by name",
        "shuffled",
        "one too many",
        "one too many inside a run",
        "a shard never named",
    )
    assert want == (case in holds)


def test_an_index_written_shard_by_shard_takes_the_runs(monkeypatch) -> None:
    taken: list[int] = []
    by_runs = ck103._by_runs
    monkeypatch.setattr(ck103, "_by_runs", lambda ckpt: taken.append(len(ckpt.index.weight_map)) or by_runs(ckpt))
    assert ck103._all_where_indexed(_checkpoint(EDITS["shard by shard"])) and taken == [72]
    assert ck103._all_where_indexed(_checkpoint(EDITS["shuffled"])) and taken == [72]  # many runs: the lookups


def _unavailable_reference(ckpt: Checkpoint) -> frozenset[str]:
    assert ckpt.index is not None
    good = {s.name for s in ckpt.shards if s.valid}
    return frozenset(t for t, shard in ckpt.index.weight_map.items() if shard not in good)


@pytest.mark.parametrize("case", sorted(EDITS))
def test_unavailable_tensors_match_the_pass_over_the_index(case: str) -> None:
    """Empty at once when every indexed shard is valid; otherwise the names in the shards that are not."""
    ckpt = _checkpoint(EDITS[case])
    assert ckpt.unavailable_tensors == _unavailable_reference(ckpt)
    assert bool(ckpt.unavailable_tensors) == (case == "mapped to a shard that does not load")
    assert ckpt.indexed_files == frozenset(EDITS[case].values())


def test_unavailable_tensors_of_an_invalid_shard() -> None:
    import dataclasses

    ckpt = _checkpoint(EDITS["shard by shard"])
    broken = dataclasses.replace(ckpt, shards=(dataclasses.replace(ckpt.shards[0], valid=False), *ckpt.shards[1:]))
    assert broken.unavailable_tensors == _unavailable_reference(broken)
    assert len(broken.unavailable_tensors) == len(ckpt.shards[0].tensors)
