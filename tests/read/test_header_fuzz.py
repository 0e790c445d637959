"""A short, seeded run of the differential header fuzzer (bench/fuzz_headers.py): ckpt's verdict and tensor names
equal the safetensors reader's on every generated file, and nothing raises. The long run is in CONTRIBUTING.md."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fuzz_headers", ROOT / "bench" / "fuzz_headers.py")
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["fuzz_headers"] = fuzz
_spec.loader.exec_module(fuzz)


def test_seeded_cases_agree_with_the_reader(tmp_path: Path) -> None:
    summary = fuzz.run(1000, seed=20261201, folder=str(tmp_path))
    assert summary.cases == 1000
    assert (summary.disagreements, summary.exceptions) == (0, 0), summary.first


@settings(
    max_examples=200,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rng=st.randoms(use_true_random=False))
def test_generated_cases_agree_with_the_reader(tmp_path: Path, rng: random.Random) -> None:
    """Hypothesis drives the generator's choices, so a failure shrinks to a small header."""
    case = fuzz.generate(rng)
    path = tmp_path / "model.safetensors"
    path.write_bytes(case.file_bytes())
    assert fuzz.ours_verdict(str(tmp_path), path.name) == fuzz.reader_verdict(str(path)), case.header[:500]


def test_the_fuzzer_finds_a_disagreement_when_there_is_one(tmp_path: Path, monkeypatch) -> None:
    """The harness can fail: with orjson's last-wins view standing in for the validator, it reports disagreements."""
    import orjson

    from ckpt_tools.read import header

    def last_wins(name: str, file_size: int, raw: bytes):
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return header._fail(name, "invalid-json", "bad")
        try:
            tensors, metadata, _, _ = header._entries(name, obj, None)
            header._validate_layout(name, file_size, len(raw), tensors)
        except header._Invalid as exc:
            return header._fail(name, exc.kind, exc.message)
        return header.ShardRead(header.Shard(name, file_size, len(raw), metadata, tuple(tensors), True), None, ())

    monkeypatch.setattr(header, "parse_header", last_wins)
    summary = fuzz.run(400, seed=3, folder=str(tmp_path), stop_after=10**9)
    assert summary.disagreements > 0
