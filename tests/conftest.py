from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.corrupt import GENUINE, copy_fixture, genuine_entries

os.environ.setdefault("CKPT_NO_PROGRESS", "1")
os.environ.setdefault("NO_COLOR", "1")
# The tests, and every command they run, keep any per-user cache (the Hub client's) in a folder of their own.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="ckpt-tests-cache-")


@pytest.fixture
def fixture_copy(tmp_path: Path):
    """Factory: a writable temporary copy of a genuine fixture."""

    def make(name: str) -> Path:
        return copy_fixture(name, tmp_path)

    return make


def pytest_generate_tests(metafunc):
    if "genuine" in metafunc.fixturenames:
        metafunc.parametrize("genuine", genuine_entries())


@pytest.fixture(scope="session")
def genuine_root() -> Path:
    return GENUINE
