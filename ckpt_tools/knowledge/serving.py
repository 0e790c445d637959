"""rules/serving.toml: serving per model family (parsers, multimodal limits), speculative pairings, how a drafter's
method is recognised, the `docker run` options that take a value, and how vLLM derives the context length."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from ._load import REQUIRED, Table, build_file


@dataclass(frozen=True)
class ServingFamily:
    id: str
    name: str
    architectures: tuple[str, ...]
    model_types: tuple[str, ...]
    reasoning_parser: str | None
    tool_call_parser: str | None
    tool_call_parsers_ok: tuple[str, ...]
    reasoning_parsers_ok: tuple[str, ...]
    mm_limits: Mapping[str, int]  # the tuned --limit-mm-per-prompt (empty: none)
    prefix_caching: bool
    dflash_drafter_attention_backend: str | None
    source: str


@dataclass(frozen=True)
class Pairing:
    method: str
    architectures: tuple[str, ...]
    num_speculative_tokens: int
    drafter: str
    source: str


@dataclass(frozen=True)
class DrafterKind:
    method: str
    config_keys: tuple[str, ...]
    architectures_contain: tuple[str, ...]
    name_contains: tuple[str, ...]
    model_types_in_choices: str | None  # a [choices] list of the runtime
    source: str


@dataclass(frozen=True)
class Speculative:
    needs_drafter: frozenset[str]  # methods that load a separate drafter checkpoint
    auto_detected_words: tuple[str, ...]  # drafter-path words vLLM reads a method from when none is named
    source: str


@dataclass(frozen=True)
class Context:
    max_len_keys: tuple[str, ...]
    rope_types_prescaled: frozenset[str]
    source: str


@dataclass(frozen=True)
class Serving:
    families: tuple[ServingFamily, ...]
    pairings: tuple[Pairing, ...]
    drafters: tuple[DrafterKind, ...]
    docker_value_options: frozenset[str]
    docker_source: str
    context: Context
    speculative: Speculative

    def family(self, architecture: str | None, model_type: str | None) -> ServingFamily | None:
        """The first family listing the architecture, else the first listing the model_type."""
        return next((f for f in self.families if architecture and architecture in f.architectures), None) or next(
            (f for f in self.families if model_type and model_type in f.model_types), None
        )

    def pairing(self, architecture: str | None, method: str) -> Pairing | None:
        return next((p for p in self.pairings if p.method == method and architecture in p.architectures), None)


def _family(t: Table) -> ServingFamily:
    return ServingFamily(
        id=t.string("id"),
        name=t.string("name"),
        architectures=t.strs("architectures"),
        model_types=t.strs("model_types"),
        reasoning_parser=t.opt_string("reasoning_parser"),
        tool_call_parser=t.opt_string("tool_call_parser"),
        tool_call_parsers_ok=t.strs("tool_call_parsers_ok"),
        reasoning_parsers_ok=t.strs("reasoning_parsers_ok"),
        mm_limits=t.mapping("mm_limits", (int,), "integers"),
        prefix_caching=t.boolean("prefix_caching", False),
        dflash_drafter_attention_backend=t.opt_string("dflash_drafter_attention_backend"),
        source=t.string("source"),
    )


def _pairing(t: Table) -> Pairing:
    return Pairing(
        t.string("method"),
        t.strs("architectures", REQUIRED),
        t.integer("num_speculative_tokens"),
        t.string("drafter"),
        t.string("source"),
    )


def _drafter(t: Table) -> DrafterKind:
    return DrafterKind(
        t.string("method"),
        t.strs("config_keys"),
        t.strs("architectures_contain"),
        t.strs("name_contains"),
        t.opt_string("model_types_in_choices"),
        t.string("source"),
    )


def parse(root: Table) -> Serving:
    docker, context, spec = root.table("docker"), root.table("context"), root.table("speculative")
    out = Serving(
        families=root.each("family", _family, required=True),
        pairings=root.each("pairing", _pairing),
        drafters=root.each("drafter", _drafter),
        docker_value_options=frozenset(docker.strs("value_options", REQUIRED)),
        docker_source=docker.string("source"),
        context=Context(
            context.strs("max_len_keys", REQUIRED),
            frozenset(context.strs("rope_types_prescaled")),
            context.string("source"),
        ),
        speculative=Speculative(
            frozenset(spec.strs("needs_drafter", REQUIRED)),
            spec.strs("auto_detected_words", REQUIRED),
            spec.string("source"),
        ),
    )
    docker.done()
    context.done()
    spec.done()
    return out


@cache
def serving() -> Serving:
    return build_file("serving.toml", parse, "serving/1")
