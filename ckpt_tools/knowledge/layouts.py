"""rules/layouts.toml: foreign (trainer) layouts, components a config declares, weight files that sit beside the
shards on purpose."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from ._load import REQUIRED, Table, build_file

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class ForeignLayout:
    id: str
    name: str
    prefixes: tuple[str, ...]
    architecture_suffix: str | None
    fix: str
    source: str


@dataclass(frozen=True)
class ComponentExpectation:
    id: str
    component: str
    config_keys: tuple[str, ...]
    min_value: int | None
    expect_prefixes: tuple[str, ...]
    expect_component: str | None
    expect_pattern: re.Pattern[str] | None
    known_family_only: bool
    severity: str
    consequence: str
    source: str


@dataclass(frozen=True)
class AlternateWeights:
    pattern: str  # fnmatch pattern on file names
    reason: str
    source: str


@dataclass(frozen=True)
class Layouts:
    foreign: tuple[ForeignLayout, ...]
    components: tuple[ComponentExpectation, ...]
    alternate_weights: tuple[AlternateWeights, ...]


def _foreign(t: Table) -> ForeignLayout:
    return ForeignLayout(
        t.string("id"),
        t.string("name"),
        t.strs("prefixes", REQUIRED),
        t.opt_string("architecture_suffix"),
        t.string("fix"),
        t.string("source"),
    )


def _component(t: Table) -> ComponentExpectation:
    out = ComponentExpectation(
        id=t.string("id"),
        component=t.string("component"),
        config_keys=t.strs("config_keys", REQUIRED),
        min_value=t.opt_integer("min_value"),
        expect_prefixes=t.strs("expect_prefixes"),
        expect_component=t.opt_string("expect_component"),
        expect_pattern=t.regex("expect_pattern", None),
        known_family_only=t.boolean("known_family_only", False),
        severity=t.choice("severity", SEVERITIES),
        consequence=t.string("consequence"),
        source=t.string("source"),
    )
    if sum(bool(x) for x in (out.expect_prefixes, out.expect_component, out.expect_pattern)) != 1:
        raise t.error(None, "a [[component]] needs exactly one of expect_prefixes, expect_component, expect_pattern")
    return out


def _alternate(t: Table) -> AlternateWeights:
    return AlternateWeights(t.string("pattern"), t.string("reason"), t.string("source"))


def parse(root: Table) -> Layouts:
    return Layouts(
        root.each("foreign", _foreign),
        root.each("component", _component),
        root.each("alternate_weights", _alternate),
    )


@cache
def layouts() -> Layouts:
    return build_file("layouts.toml", parse, "layouts/1")


def foreign_layouts() -> tuple[ForeignLayout, ...]:
    return layouts().foreign


def component_expectations() -> tuple[ComponentExpectation, ...]:
    return layouts().components


def alternate_weights() -> tuple[AlternateWeights, ...]:
    return layouts().alternate_weights
