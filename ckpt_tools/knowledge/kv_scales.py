"""rules/kv_scales.toml: KV-cache scale spellings, the attention-module names they hang off, and what each runtime
accepts as a declared KV-cache quantization."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from ._load import REQUIRED, KnowledgeError, Table, build_file

STATUSES = ("loaded", "deprecated", "method-only")


@dataclass(frozen=True)
class KvSpelling:
    id: str
    pattern: re.Pattern[str]
    writer: str
    status: str
    methods: tuple[str, ...]
    consequence: str | None
    source: str


@dataclass(frozen=True)
class Attention:
    """Where KV scales live: their suffixes, and the module names that make a block an attention block."""

    scale_suffixes: tuple[str, ...]  # `*.k_scale`, ... (plus a q/k/v projection's `output_scale`)
    projections: tuple[str, ...]  # q/k/qkv projections whose parent is an attention block
    blocks: tuple[str, ...]  # last segment of an attention block's name
    source: str


@dataclass(frozen=True)
class KvRuntime:
    """What a runtime accepts as a declared KV-cache quantization (`[runtime."<profile id>"]`)."""

    modelopt_kv_algos: tuple[str, ...]
    ct_kv_type: str
    ct_kv_num_bits: int
    ct_kv_strategies: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class KvRelease:
    """Which spellings some vLLM releases' loaders rename onto the attention layer (`[[release]]`)."""

    vllm: tuple[str, ...]  # the releases, e.g. ("0.26.0", "0.27.1", "0.33.0")
    spellings: tuple[str, ...]  # ids of the renamed [[spelling]] entries
    renamed_by: str
    missing_target: str
    drops_unrenamed: tuple[str, ...]  # rules/loader.toml model class ids that skip an unrenamed KV-scale name
    source: str

    def drops(self, model_class_id: str) -> bool:
        """Whether that model class's loader skips a KV-scale name this release does not rename (else it raises)."""
        return model_class_id in self.drops_unrenamed


@dataclass(frozen=True)
class KvScales:
    spellings: tuple[KvSpelling, ...]
    attention: Attention
    runtimes: Mapping[str, KvRuntime]
    releases: tuple[KvRelease, ...]


def _spelling(t: Table) -> KvSpelling:
    return KvSpelling(
        t.string("id"),
        t.regex("pattern"),
        t.string("writer"),
        t.choice("status", STATUSES),
        t.strs("methods"),
        t.opt_string("consequence"),
        t.string("source"),
    )


def _runtime(_: str, t: Table) -> KvRuntime:
    return KvRuntime(
        t.strs("modelopt_kv_algos", REQUIRED),
        t.string("ct_kv_type"),
        t.integer("ct_kv_num_bits"),
        t.strs("ct_kv_strategies", REQUIRED),
        t.string("source"),
    )


def _release(t: Table) -> KvRelease:
    return KvRelease(
        t.strs("vllm", REQUIRED),
        t.strs("spellings", REQUIRED),
        t.string("renamed_by"),
        t.string("missing_target"),
        t.strs("drops_unrenamed"),
        t.string("source"),
    )


def _check_releases(root: Table, spellings: tuple[KvSpelling, ...], releases: tuple[KvRelease, ...]) -> None:
    known = {s.id for s in spellings}
    seen: set[str] = set()
    for r in releases:
        unknown = sorted(set(r.spellings) - known)
        if unknown:
            raise root.error("release", f"release {', '.join(r.vllm)} names unknown spellings: {', '.join(unknown)}")
        twice = sorted(seen & set(r.vllm))
        if twice:
            raise root.error("release", f"vLLM {', '.join(twice)} appears in more than one release entry")
        seen.update(r.vllm)


def parse(root: Table) -> KvScales:
    attention = root.table("attention")
    out = KvScales(
        spellings=root.each("spelling", _spelling, required=True),
        attention=Attention(
            attention.strs("scale_suffixes", REQUIRED),
            attention.strs("projections", REQUIRED),
            attention.strs("blocks", REQUIRED),
            attention.string("source"),
        ),
        runtimes=root.table("runtime").sub_tables(_runtime),
        releases=root.each("release", _release, required=True),
    )
    _check_releases(root, out.spellings, out.releases)
    attention.done()
    return out


@cache
def kv_scales() -> KvScales:
    return build_file("kv_scales.toml", parse, "kv-scales/1")


def spellings() -> tuple[KvSpelling, ...]:
    return kv_scales().spellings


def attention() -> Attention:
    return kv_scales().attention


_PROJ_OUTPUT = re.compile(r"\.[kvq]_proj\.output_scale$")


def release_mapping(vllm_version: str) -> KvRelease | None:
    """The `[[release]]` entry covering a vLLM release, or None when no entry lists it."""
    return next((r for r in kv_scales().releases if vllm_version in r.vllm), None)


def renaming(vllm_version: str) -> KvRelease:
    """The KV-scale renaming of a runtime's vLLM release; the load model's own release (rules/loader.toml
    `release`) when no entry lists it (the load accounting's `judged_by` then says which release judged)."""
    from .loader import loader

    mapping = release_mapping(vllm_version) or release_mapping(loader().release)
    if mapping is None:
        raise KnowledgeError(f"rules/kv_scales.toml: no [[release]] entry covers vLLM {loader().release}")
    return mapping


def is_kv_scale_name(name: str) -> bool:
    """A tensor that is a KV-cache (attention) scale: `*.k_scale`, `*.v_scale`, `*.q_scale`, `*.kv_scale`, or a
    q/k/v projection's `output_scale`."""
    suffix = name.rsplit(".", 1)[-1]
    if suffix in attention().scale_suffixes:
        return True
    return suffix == "output_scale" and bool(_PROJ_OUTPUT.search(name))


def classify(name: str) -> KvSpelling | None:
    """The first spelling whose pattern matches the tensor name."""
    for spelling in spellings():
        if spelling.pattern.search(name):
            return spelling
    return None


def kv_runtime(runtime_id: str) -> KvRuntime | None:
    """What a runtime accepts as a declared KV-cache quantization; the newest profile listed when the runtime has no
    entry of its own, None when the file lists none."""
    table = kv_scales().runtimes
    if runtime_id in table:
        return table[runtime_id]
    return table[sorted(table)[-1]] if table else None
