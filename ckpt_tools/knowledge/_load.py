"""The one reader every knowledge module parses its rules/ file through: typed getters that validate while they read.

A module builds its frozen dataclasses from a `Table`, asking for each key with the type it expects
(`t.string("id")`, `t.strs("prefixes")`, `t.each("family", build)`). Every getter marks its key as read; when a build
function returns, any key it never asked for is an unknown key. Both mistakes, and a missing required key, raise
`KnowledgeError` naming the file and the line: tomllib reports no positions, so the line is found in the text (the
key's assignment or table header after the enclosing table's own line), which is exact for the layouts rules/ uses.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from ..errors import CkptError

T = TypeVar("T")
_BRACE = re.compile(r"\{")
REQUIRED: Any = object()
_TYPE_NAMES = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    list: "a list",
    dict: "a table",
}


class KnowledgeError(CkptError):
    """A rules/ file that does not follow its documented schema (rules/README.md): `file:line: what is wrong`."""


def rules_dir() -> Path:
    """The knowledge folder: `ckpt_tools/_rules` in an installed wheel, the checkout's `rules/` otherwise."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "_rules"
    return packaged if packaged.is_dir() else package.parent / "rules"


@dataclass(frozen=True)
class Source:
    """A file's name as errors show it (`rules/hardware.toml`) and its text, to place errors."""

    name: str
    text: str

    @cached_property
    def lines(self) -> list[str]:  # split only when an error is placed
        return self.text.splitlines()

    def find(self, pattern: re.Pattern[str], start: int, nth: int = 0) -> int | None:
        """The 1-based line of the `nth` match at or after line `start`."""
        for i in range(max(start, 1) - 1, len(self.lines)):
            if pattern.search(self.lines[i]):
                if nth == 0:
                    return i + 1
                nth -= 1
        return None


def _key_pattern(key: str) -> str:
    return "(?:" + "|".join(re.escape(k) for k in (f'"{key}"', f"'{key}'", key)) + ")"


def _header(path: tuple[str, ...], array: bool) -> re.Pattern[str]:
    inner = r"\s*\.\s*".join(_key_pattern(p) for p in path)
    open_, close = (r"\[\[", r"\]\]") if array else (r"\[", r"\]")
    return re.compile(rf"^\s*{open_}\s*{inner}\s*{close}")


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    for kind, name in _TYPE_NAMES.items():
        if isinstance(value, kind):
            return name
    return type(value).__name__


class Table:
    """One TOML table of a rules file, read key by key (see the module docstring)."""

    def __init__(
        self, source: Source, data: Mapping[str, Any], path: tuple[str, ...], locate: Callable[[], int], label: str
    ) -> None:
        self.source = source
        self._data = data
        self._path = path  # the TOML header path of this table (`family.roots`), to find nested headers
        self._locate = locate  # finds the table's first line: searched only when an error needs it
        self._line_found: int | None = None
        self._label = label  # how errors name the table: `[[family]] #2`, `[serve.behaviour]`
        self._read: set[str] = set()

    @property
    def _line(self) -> int:
        if self._line_found is None:
            self._line_found = self._locate()
        return self._line_found

    # ---- errors and positions ----------------------------------------------------------------------------------

    def line_of(self, key: str) -> int:
        assign = re.compile(rf"(?:^|[\s{{,.])\s*{_key_pattern(key)}\s*(?:=|\.)")
        header = _header((*self._path, key), array=False)
        array = _header((*self._path, key), array=True)
        found = [n for p in (assign, header, array) if (n := self.source.find(p, self._line)) is not None]
        return min(found) if found else self._line

    def error(self, key: str | None, message: str) -> KnowledgeError:
        line = self.line_of(key) if key is not None else self._line
        return KnowledgeError(f"{self.source.name}:{line}: {message}")

    def done(self) -> None:
        """Fail on the first key no getter asked for."""
        for key in self._data:
            if key not in self._read:
                raise self.error(key, f"unknown key {key!r} in {self._label} (schema: rules/README.md)")

    # ---- typed getters -----------------------------------------------------------------------------------------

    def has(self, key: str) -> bool:
        return key in self._data

    def _get(self, key: str, kinds: tuple[type, ...], what: str, default: Any) -> Any:
        self._read.add(key)
        if key not in self._data:
            if default is REQUIRED:
                raise self.error(None, f"{self._label} lacks the required key {key!r}")
            return default
        value = self._data[key]
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise self.error(key, f"{key!r} in {self._label} must be {what}, not {_type_name(value)}")
        return value

    def scalar(self, key: str, default: Any = REQUIRED) -> Any:
        """A config value to compare with: a string, number or boolean."""
        return self._get(key, (str, int, float, bool), "a string, number or boolean", default)

    def string(self, key: str, default: Any = REQUIRED) -> Any:
        return self._get(key, (str,), "a string", default)

    def opt_string(self, key: str) -> str | None:
        return self.string(key, None)

    def choice(self, key: str, allowed: tuple[str, ...], default: Any = REQUIRED) -> Any:
        value = self.string(key, default)
        if value is not None and value not in allowed and key in self._data:
            raise self.error(key, f"{key!r} in {self._label} must be one of {', '.join(allowed)}, not {value!r}")
        return value

    def boolean(self, key: str, default: Any = REQUIRED) -> Any:
        return self._get(key, (bool,), "a boolean", default)

    def integer(self, key: str, default: Any = REQUIRED) -> Any:
        return self._get(key, (int,), "an integer", default)

    def opt_integer(self, key: str) -> int | None:
        return self.integer(key, None)

    def number(self, key: str, default: Any = REQUIRED) -> Any:
        value = self._get(key, (int, float), "a number", default)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    def opt_number(self, key: str) -> float | None:
        return self.number(key, None)

    def _list(self, key: str, kinds: tuple[type, ...], what: str, default: Any) -> tuple[Any, ...]:
        value = self._get(key, (list,), f"a list of {what}", default)
        if value is None:
            return ()
        for item in value:
            if (isinstance(item, bool) and bool not in kinds) or not isinstance(item, kinds):
                raise self.error(key, f"{key!r} in {self._label} must be a list of {what}, holds {_type_name(item)}")
        return tuple(value)

    def strs(self, key: str, default: Any = ()) -> tuple[str, ...]:
        return self._list(key, (str,), "strings", default)

    def ints(self, key: str, default: Any = ()) -> tuple[int, ...]:
        return self._list(key, (int,), "integers", default)

    def scalars(self, key: str, default: Any = ()) -> tuple[Any, ...]:
        """A list of config values (strings, numbers, booleans), as formats.toml compares them."""
        return self._list(key, (str, int, float, bool), "strings, numbers or booleans", default)

    def pairs(self, key: str) -> tuple[tuple[str, str], ...]:
        """A list of `[a, b]` string pairs."""
        value = self._get(key, (list,), "a list of [string, string] pairs", [])
        for item in value:
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                raise self.error(key, f"{key!r} in {self._label} must be a list of [string, string] pairs")
        return tuple((a, b) for a, b in value)

    def mapping(self, key: str, kinds: tuple[type, ...] = (str,), what: str = "strings") -> Mapping[str, Any]:
        """A table of free keys (architecture names, model types) to values of one type; empty when absent."""
        sub = self.opt_table(key)
        if sub is None:
            return MappingProxyType({})
        return sub.values(kinds, what)

    def values(self, kinds: tuple[type, ...] = (str,), what: str = "strings", skip: tuple[str, ...] = ()) -> Any:
        """This whole table as free keys to values of one type (`skip`: keys read otherwise, e.g. `source`)."""
        out = {}
        for k in self._data:
            if k in skip:
                continue
            out[k] = self._get(k, kinds, what, REQUIRED)
        return MappingProxyType(out)

    def string_lists(self, skip: tuple[str, ...] = ()) -> Mapping[str, tuple[str, ...]]:
        """This whole table as free keys to lists of strings (`skip`: keys read otherwise)."""
        return MappingProxyType({k: self.strs(k) for k in self._data if k not in skip})

    def table(self, key: str) -> Table:
        found = self.opt_table(key)
        if found is None:
            raise self.error(None, f"{self._label} lacks the required table {key!r}")
        return found

    def opt_table(self, key: str) -> Table | None:
        value = self._get(key, (dict,), "a table", None)
        if value is None:
            return None
        path = (*self._path, key)
        return Table(
            self.source,
            value,
            path,
            lambda: self.source.find(_header(path, array=False), self._line) or self.line_of(key),
            "[" + ".".join(path) + "]",
        )

    def one(self, key: str, build: Callable[[Table], T]) -> T:
        """Build a required sub-table, checked for unknown keys once `build` returns."""
        table = self.table(key)
        out = build(table)
        table.done()
        return out

    def opt_one(self, key: str, build: Callable[[Table], T]) -> T | None:
        """Build an optional sub-table as `one` does; None when the table is absent."""
        table = self.opt_table(key)
        if table is None:
            return None
        out = build(table)
        table.done()
        return out

    def each(self, key: str, build: Callable[[Table], T], required: bool = False) -> tuple[T, ...]:
        """Build every table of an array of tables (`[[key]]` or an inline list of tables), each checked for
        unknown keys once `build` returns."""
        value = self._get(key, (list,), "a list of tables", REQUIRED if required else [])
        path = (*self._path, key)
        out = []
        for i, item in enumerate(value):
            label = f"[[{'.'.join(path)}]] #{i + 1}"
            if not isinstance(item, dict):
                raise self.error(key, f"{label} must be a table, not {_type_name(item)}")
            sub = Table(self.source, item, path, self._element_locator(key, i), label)
            out.append(build(sub))
            sub.done()
        return tuple(out)

    def _element_locator(self, key: str, i: int) -> Callable[[], int]:
        """Where the i-th table of the array `key` starts: its `[[...]]` header, else its `{` in an inline list."""

        def locate() -> int:
            header = _header((*self._path, key), array=True)
            inline_from = self.line_of(key)
            found = self.source.find(header, self._line, nth=i) or self.source.find(_BRACE, inline_from, nth=i)
            return found or inline_from

        return locate

    def sub_tables(self, build: Callable[[str, Table], T], skip: tuple[str, ...] = ()) -> Mapping[str, T]:
        """Free keys to tables (`[flags."--x"]`, `[runtime."<id>"]`), each built and checked."""
        out = {}
        for k in self._data:
            if k in skip:
                continue
            sub = self.table(k)
            out[k] = build(k, sub)
            sub.done()
        return MappingProxyType(out)

    def regex(self, key: str, default: Any = REQUIRED) -> Any:
        text = self.string(key, default)
        if not isinstance(text, str):  # the default of an optional pattern
            return text
        try:
            return re.compile(text)
        except re.error as exc:
            raise self.error(key, f"{key!r} in {self._label} is not a valid regex: {exc}") from None


def parse(name: str, text: str) -> Table:
    """The root table of a rules file's text (`name` is how errors show the file)."""
    source = Source(name, text)
    try:
        data = toml_module().loads(text)
    except toml_module().TOMLDecodeError as exc:
        raise KnowledgeError(f"{name}: not valid TOML: {exc}") from None
    return Table(source, data, (), lambda: 1, "the file")


def toml_module() -> Any:
    """The TOML parser: the standard library's from Python 3.11, `tomli` before."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    return tomllib


def read(relative: str) -> Table:
    """The root table of `rules/<relative>`; the build function that reads it must call `done()` on it (or use
    `build_file`)."""
    path = rules_dir() / relative
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KnowledgeError(f"rules/{relative}: cannot read the knowledge file: {exc.strerror or exc}") from None
    return parse(f"rules/{relative}", text)


def build_file(relative: str, build: Callable[[Table], T], schema: str) -> T:
    """Parse `rules/<relative>` with `build`, checking its `schema` line and that no key is left unread."""
    return build_table(read(relative), build, schema)


def build_table(root: Table, build: Callable[[Table], T], schema: str) -> T:
    declared = root.string("schema")
    if declared != schema:
        raise root.error("schema", f"schema is {declared!r}; this release reads {schema!r}")
    out = build(root)
    root.done()
    return out


def top_keys(name: str, text: str) -> Mapping[str, Any]:
    """The keys of a TOML text that come before its first table, without parsing the tables (a runtime profile is
    mostly flag tables; a command needs one profile, not all of them, to learn the profiles' ids). When the text
    before the first line opening with `[` is not valid TOML by itself (that line was inside a multi-line value),
    the whole text is parsed instead, so the answer is always the file's own."""
    lines = text.splitlines(keepends=True)
    cut = next((i for i, line in enumerate(lines) if line.startswith("[")), None)
    if cut is not None:
        try:
            return MappingProxyType(toml_module().loads("".join(lines[:cut])))
        except toml_module().TOMLDecodeError:
            pass
    try:
        return MappingProxyType(toml_module().loads(text))
    except toml_module().TOMLDecodeError as exc:
        raise KnowledgeError(f"{name}: not valid TOML: {exc}") from None


@cache
def top_level(relative: str) -> Mapping[str, Any]:
    """`top_keys` of `rules/<relative>`, once per process."""
    return top_keys(f"rules/{relative}", (rules_dir() / relative).read_text(encoding="utf-8"))
