"""The parse cache of rules/ files (`knowledge._parse_cache`): a stored parse stands in for tomllib only for the very
text it came from; a damaged, unwritable or disabled cache costs the parse, never an error or another answer."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from ckpt_tools.knowledge import _load, _parse_cache
from ckpt_tools.knowledge._load import KnowledgeError, parse, top_keys

TEXT = 'schema = "x/1"\nname = "a"\n\n[table]\nvalue = 1.5\nflags = ["--x", "--y"]\n'


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CKPT_NO_CACHE", raising=False)
    return tmp_path / "ckpt-tools" / "knowledge"


def no_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("tomllib was asked for")

    monkeypatch.setattr(_load, "toml_module", refuse)


def parsed(text: str) -> dict:
    table = parse("rules/example.toml", text)
    return dict(table._data)


def test_a_second_parse_of_the_same_text_is_the_stored_one(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = parsed(TEXT)
    assert len(list(cache_home.iterdir())) == 1
    no_parser(monkeypatch)
    assert parsed(TEXT) == first == {"schema": "x/1", "name": "a", "table": {"value": 1.5, "flags": ["--x", "--y"]}}


def test_an_edited_file_is_parsed_again(cache_home: Path) -> None:
    parsed(TEXT)
    assert parsed(TEXT.replace("1.5", "2.5"))["table"]["value"] == 2.5
    assert parsed(TEXT)["table"]["value"] == 1.5


def test_a_damaged_entry_is_parsed_again_and_replaced(cache_home: Path) -> None:
    expected = parsed(TEXT)
    [entry] = cache_home.iterdir()
    for damage in (b"", b"\x00garbage", entry.read_bytes()[:-3]):
        entry.write_bytes(damage)
        assert parsed(TEXT) == expected
    assert _parse_cache.load("rules/example.toml", TEXT) == expected  # rewritten whole


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_an_unwritable_cache_folder_is_no_error(cache_home: Path) -> None:
    cache_home.parent.mkdir(parents=True)
    cache_home.parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert parsed(TEXT)["name"] == "a"
        assert not cache_home.exists()
    finally:
        cache_home.parent.chmod(stat.S_IRWXU)


def test_a_cache_path_that_is_a_file_is_no_error(cache_home: Path) -> None:
    cache_home.parent.mkdir(parents=True)
    cache_home.write_text("not a folder")
    assert parsed(TEXT)["name"] == "a"


def test_ckpt_no_cache_writes_nothing(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_NO_CACHE", "1")
    parsed(TEXT)
    assert not cache_home.exists()


def test_invalid_toml_is_the_same_error_and_is_not_stored(cache_home: Path) -> None:
    for _ in range(2):
        with pytest.raises(KnowledgeError, match=re.escape("rules/example.toml: not valid TOML")):
            parsed("schema = \n")
    assert not cache_home.exists() or not list(cache_home.iterdir())


def test_top_keys_come_from_the_cache_too(cache_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = dict(top_keys("rules/example.toml", TEXT))
    assert first == {"schema": "x/1", "name": "a"}
    no_parser(monkeypatch)
    assert dict(top_keys("rules/example.toml", TEXT)) == first


def test_every_shipped_rules_file_reads_the_same_from_the_cache(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = sorted(_load.rules_dir().rglob("*.toml"))
    assert len(files) >= 10
    fresh = {f: parse(str(f), f.read_text(encoding="utf-8"))._data for f in files}
    no_parser(monkeypatch)
    assert {f: parse(str(f), f.read_text(encoding="utf-8"))._data for f in files} == fresh
