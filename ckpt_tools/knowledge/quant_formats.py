"""rules/formats.toml: the quantization formats beyond ModelOpt / compressed-tensors (what `--quantization` a
`quant_method` becomes, which config values its class accepts), the methods a release has no class for, and how a
config names the tool that wrote it. detect/quant_formats.py applies them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

from ._load import Table, build_file

NO_DEFAULT: Any = object()  # an accepted key without a default: absent from the config means rejected


@dataclass(frozen=True)
class Accept:
    key: str
    aliases: tuple[str, ...]
    values: tuple[Any, ...]
    default: Any  # NO_DEFAULT when the file gives none
    contains: tuple[str, ...]
    with_key: str | None
    with_values: tuple[Any, ...]
    unless_key: str | None
    unless_values: tuple[Any, ...]
    reject: str


@dataclass(frozen=True)
class QuantFormat:
    id: str
    name: str
    vllm_method: str
    override_from: tuple[str, ...]
    config_class: str
    deprecated: bool
    layout: str
    accepts: tuple[Accept, ...]
    source: str
    # model_type -> the method an override_quantization_method renames this one to for that model (mxfp4 on gpt_oss
    # -> gpt_oss_mxfp4)
    model_type_methods: Mapping[str, str]


@dataclass(frozen=True)
class Unsupported:
    id: str
    name: str
    hint: str
    source: str


@dataclass(frozen=True)
class MadeBy:
    name: str
    when_key: str  # dotted config key, optionally `=value`
    version_key: str | None
    source: str


@dataclass(frozen=True)
class Formats:
    formats: Mapping[str, QuantFormat]
    unsupported: tuple[Unsupported, ...]
    made_by: tuple[MadeBy, ...]


def _accept(t: Table) -> Accept:
    default = t.scalar("default", NO_DEFAULT)
    return Accept(
        key=t.string("key"),
        aliases=t.strs("aliases"),
        values=t.scalars("values"),
        default=default,
        contains=t.strs("contains"),
        with_key=t.opt_string("with_key"),
        with_values=t.scalars("with_values"),
        unless_key=t.opt_string("unless_key"),
        unless_values=t.scalars("unless_values"),
        reject=t.string("reject"),
    )


def _format(t: Table) -> QuantFormat:
    fid = t.string("id")
    return QuantFormat(
        id=fid,
        name=t.string("name"),
        vllm_method=t.string("vllm_method"),
        override_from=t.strs("override_from"),
        config_class=t.string("config_class"),
        deprecated=t.boolean("deprecated", False),
        layout=t.string("layout", fid),
        accepts=t.each("accept", _accept),
        source=t.string("source"),
        model_type_methods=t.mapping("model_type_methods"),
    )


def _unsupported(t: Table) -> Unsupported:
    return Unsupported(t.string("id"), t.string("name"), t.string("hint"), t.string("source"))


def _made_by(t: Table) -> MadeBy:
    return MadeBy(t.string("name"), t.string("when_key"), t.opt_string("version_key"), t.string("source"))


def parse(root: Table) -> Formats:
    return Formats(
        MappingProxyType({f.id: f for f in root.each("format", _format, required=True)}),
        root.each("unsupported", _unsupported),
        root.each("made_by", _made_by),
    )


@cache
def knowledge() -> Formats:
    return build_file("formats.toml", parse, "formats/1")


def formats() -> Mapping[str, QuantFormat]:
    return knowledge().formats


def format_for(method: str | None) -> QuantFormat | None:
    return formats().get(method or "")


@cache
def unsupported_hints() -> Mapping[str, str]:
    return MappingProxyType({u.id: u.hint for u in knowledge().unsupported})


def made_by_table() -> tuple[MadeBy, ...]:
    return knowledge().made_by
