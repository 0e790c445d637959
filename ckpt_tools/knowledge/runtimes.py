"""rules/runtimes/*.toml: runtime profiles (a vLLM release or a serving image): accepted quantization methods and
ModelOpt algos, served architectures, the `vllm serve` CLI table, environment variables, serving defaults.

Profiles are parsed one at a time, on demand: `runtime_ids()` and `default_runtime_id()` read only the keys above
each file's first table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from types import MappingProxyType

from ..errors import UsageError
from ._load import REQUIRED, KnowledgeError, Table, build_file, rules_dir, top_level
from .hardware import EnvTrap, Hardware, env_trap

ARITIES = ("value", "boolean", "switch", "optional_value")  # how `vllm serve` options take a value
FLAG_TYPES = ("int", "float", "human_int", "human_int_or_auto", "json", "str")


@dataclass(frozen=True)
class ModelOptSupport:
    nvfp4_nested_required: tuple[str, ...]
    loads_pre_quant_scale: bool
    always_unquantized: tuple[str, ...]


@dataclass(frozen=True)
class Quantization:
    methods: tuple[str, ...]
    deprecated_methods: tuple[str, ...]
    modelopt_algos: Mapping[str, str]  # quant_algo -> owning method (from_config)
    modelopt_nested_algos: Mapping[str, str]  # algos the nested-config normaliser maps
    modelopt: ModelOptSupport
    sparsity_rejection: str | None  # None: the runtime loads compressed-tensors sparse checkpoints


@dataclass(frozen=True)
class Behaviour:
    linear_backend_w4a4_on_a16: str | None
    moe_backend_w4a4_on_a16: str | None
    long_max_model_len_env: str | None
    mamba_block_size_requires_prefix_caching: bool
    auto_tool_choice_requires_parser: bool
    source: str | None


NO_BEHAVIOUR = Behaviour(None, None, None, False, False, None)


@dataclass(frozen=True)
class Serve:
    command: tuple[str, ...]
    image: str  # pinned tag
    entrypoint: str
    cache_dir: str | None
    hf_cache_dir: str | None
    hardware: tuple[str, ...]  # hardware the runtime runs on; empty: any profile
    default_hardware: str | None
    gpu_memory_utilization_default: float | None
    compile_range_max_batched_tokens: int | None
    behaviour: Behaviour
    source: str | None


@dataclass(frozen=True)
class DFlash:
    kv_cache_dtypes: tuple[str, ...]
    drafter_attention_backend: str | None
    target_attention_backend: str | None
    drafter_kv_cache_dtype: bool
    source: str


@dataclass(frozen=True)
class FlagSpec:
    """How a flag's value is checked (`[flags."--x"]`)."""

    type: str | None
    gt: float | None
    le: float | None
    choices: str | None  # a key of [choices]
    also: tuple[str, ...]
    normalize: str | None  # lower-dash / upper
    modalities: tuple[str, ...]
    keys: tuple[str, ...]
    source: str | None


NO_SPEC = FlagSpec(None, None, None, None, (), None, (), (), None)


@dataclass(frozen=True)
class FlagInfo:
    """One option of the runtime's CLI: canonical name, how it takes a value, and what the value must be."""

    name: str
    arity: str  # one of ARITIES
    spec: FlagSpec
    choices: tuple[str, ...] | None

    @property
    def type(self) -> str:
        return self.spec.type or ("choice" if self.choices is not None else "str")

    def normalize(self, value: str) -> str:
        if self.spec.normalize == "lower-dash":
            return value.lower().replace("-", "_")
        if self.spec.normalize == "upper":
            return value.upper()
        return value


@dataclass(frozen=True)
class RemovedEnv:
    name: str
    replacement: str
    source: str


@dataclass(frozen=True)
class Env:
    known: frozenset[str]  # generated, plus extra_known
    removed: Mapping[str, RemovedEnv]
    traps: tuple[EnvTrap, ...]
    baked: Mapping[str, str]  # variables the image sets itself
    source: str | None


@dataclass(frozen=True)
class Cli:
    by_arity: Mapping[str, tuple[str, ...]]
    aliases: Mapping[str, str]
    source: str


@dataclass(frozen=True)
class Runtime:
    id: str
    name: str
    vllm_version: str
    default: bool
    source: str
    quantization: Quantization
    hints: Mapping[str, str]  # algo -> what to tell a user whose algo this runtime rejects
    architectures: frozenset[str] | None  # served natively; None when the profile does not list them
    previously_supported: Mapping[str, str]  # dropped architecture -> last vLLM release that served it
    serve: Serve
    dflash: DFlash | None
    flag_specs: Mapping[str, FlagSpec]
    cli: Cli
    choice_lists: Mapping[str, tuple[str, ...]]  # [choices] plus [choices_extra]
    env: Env
    flags: Mapping[str, FlagInfo] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        table: dict[str, FlagInfo] = {}
        for arity in ARITIES:
            for name in self.cli.by_arity.get(arity, ()):
                spec = self.flag_specs.get(name, NO_SPEC)
                choices = self.choices(spec.choices) + spec.also if spec.choices is not None else None
                table[name] = FlagInfo(name, arity, spec, choices)
        object.__setattr__(self, "flags", MappingProxyType(table))

    def choices(self, key: str) -> tuple[str, ...]:
        return self.choice_lists.get(key, ())

    @property
    def image(self) -> str:
        return self.serve.image

    @property
    def hardware_ids(self) -> tuple[str, ...]:
        """Hardware the runtime runs on; empty means any profile in rules/hardware.toml."""
        return self.serve.hardware

    @property
    def behaviour(self) -> Behaviour:
        return self.serve.behaviour

    def lookup(self, spelled: str) -> tuple[FlagInfo | None, bool]:
        """(flag, negated) for an option as typed; underscores become dashes like FlexibleArgumentParser does."""
        name = spelled
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        name = self.cli.aliases.get(name, name)
        if name in self.flags:
            return self.flags[name], False
        if name.startswith("--no-"):
            info = self.flags.get("--" + name[5:])
            if info is not None and info.arity == "boolean":
                return info, True
        return None, False

    def source_of(self, flag: str) -> str:
        spec = self.flag_specs.get(flag, NO_SPEC)
        return f"rules/runtimes ({self.id}): {spec.source or self.cli.source}"

    def hardware_mismatch(self, hw: Hardware | None) -> str | None:
        """Why the runtime cannot run on the hardware, or None."""
        if hw is None or not self.hardware_ids or hw.id in self.hardware_ids:
            return None
        return (
            f"{self.name} is built for {', '.join(self.hardware_ids)} only, not {hw.id}: its CUDA kernels are "
            f"compiled for those GPUs alone, so on {hw.id} vLLM stops at the first kernel launch ('no kernel image "
            f"is available for execution on the device')"
        )


# ---- parsing --------------------------------------------------------------------------------------------------


def _modelopt(t: Table) -> ModelOptSupport:
    return ModelOptSupport(
        t.strs("nvfp4_nested_required"), t.boolean("loads_pre_quant_scale"), t.strs("always_unquantized")
    )


def _quantization(t: Table) -> Quantization:
    return Quantization(
        methods=t.strs("methods", REQUIRED),
        deprecated_methods=t.strs("deprecated_methods"),
        modelopt_algos=t.mapping("modelopt_algos"),
        modelopt_nested_algos=t.mapping("modelopt_nested_algos"),
        modelopt=t.one("modelopt", _modelopt),
        sparsity_rejection=t.opt_one("compressed_tensors", lambda ct: ct.opt_string("sparsity_rejection")),
    )


def _behaviour(t: Table) -> Behaviour:
    return Behaviour(
        t.choice("linear_backend_w4a4_on_a16", ("fallback", "crash"), None),
        t.choice("moe_backend_w4a4_on_a16", ("error",), None),
        t.opt_string("long_max_model_len_env"),
        t.boolean("mamba_block_size_requires_prefix_caching", False),
        t.boolean("auto_tool_choice_requires_parser", False),
        t.opt_string("source"),
    )


def _serve(t: Table) -> Serve:
    return Serve(
        command=t.strs("command", REQUIRED),
        image=t.string("image"),
        entrypoint=t.string("entrypoint"),
        cache_dir=t.opt_string("cache_dir"),
        hf_cache_dir=t.opt_string("hf_cache_dir"),
        hardware=t.strs("hardware"),
        default_hardware=t.opt_string("default_hardware"),
        gpu_memory_utilization_default=t.opt_number("gpu_memory_utilization_default"),
        compile_range_max_batched_tokens=t.opt_integer("compile_range_max_batched_tokens"),
        behaviour=t.opt_one("behaviour", _behaviour) or NO_BEHAVIOUR,
        source=t.opt_string("source"),
    )


def _dflash(t: Table) -> DFlash:
    return DFlash(
        t.strs("kv_cache_dtypes", REQUIRED),
        t.opt_string("drafter_attention_backend"),
        t.opt_string("target_attention_backend"),
        t.boolean("drafter_kv_cache_dtype", False),
        t.string("source"),
    )


def _flag(_: str, t: Table) -> FlagSpec:
    return FlagSpec(
        type=t.choice("type", FLAG_TYPES, None),
        gt=t.opt_number("gt"),
        le=t.opt_number("le"),
        choices=t.opt_string("choices"),
        also=t.strs("also"),
        normalize=t.choice("normalize", ("lower-dash", "upper"), None),
        modalities=t.strs("modalities"),
        keys=t.strs("keys"),
        source=t.opt_string("source"),
    )


def _removed(t: Table) -> RemovedEnv:
    return RemovedEnv(t.string("name"), t.string("replacement"), t.string("source"))


def _env(t: Table) -> Env:
    return Env(
        known=frozenset(t.strs("known")) | frozenset(t.strs("extra_known")),
        removed=MappingProxyType({r.name: r for r in t.each("removed", _removed)}),
        traps=t.each("trap", env_trap),
        baked=t.mapping("baked"),
        source=t.opt_string("source"),
    )


def _cli(t: Table) -> Cli:
    return Cli(MappingProxyType({a: t.strs(a) for a in ARITIES}), t.mapping("aliases"), t.string("source"))


def _choices(root: Table) -> Mapping[str, tuple[str, ...]]:
    base = root.opt_table("choices")
    extra = root.opt_table("choices_extra")
    lists: dict[str, tuple[str, ...]] = dict(base.string_lists(skip=("source",))) if base else {}
    for key, values in (extra.string_lists(skip=("source",)) if extra else {}).items():
        lists[key] = lists.get(key, ()) + values
    for sub in (base, extra):
        if sub is not None:
            sub.string("source", None)
            sub.done()
    return MappingProxyType(lists)


def parse(root: Table) -> Runtime:
    archs = root.opt_table("architectures")
    speculative = root.opt_table("speculative")
    flags = root.opt_table("flags")
    out = Runtime(
        id=root.string("id"),
        name=root.string("name"),
        vllm_version=root.string("vllm_version"),
        default=root.boolean("default", False),
        source=root.string("source"),
        quantization=root.one("quantization", _quantization),
        hints=root.mapping("hints"),
        architectures=frozenset(archs.strs("supported")) if archs and archs.has("supported") else None,
        previously_supported=archs.mapping("previously_supported") if archs else MappingProxyType({}),
        serve=root.one("serve", _serve),
        dflash=speculative.opt_one("dflash", _dflash) if speculative else None,
        flag_specs=flags.sub_tables(_flag) if flags else MappingProxyType({}),
        cli=root.one("cli", _cli),
        choice_lists=_choices(root),
        env=root.opt_one("env", _env) or Env(frozenset(), MappingProxyType({}), (), MappingProxyType({}), None),
    )
    for sub in (archs, speculative, flags):
        if sub is not None:
            sub.done()
    return out


# ---- profiles -------------------------------------------------------------------------------------------------


@cache
def _files() -> Mapping[str, str]:
    """Profile id -> file. Upstream profiles are named after their id; image profiles after the image tag."""
    out: dict[str, str] = {}
    for p in sorted((rules_dir() / "runtimes").glob("*.toml")):
        pid = top_level(f"runtimes/{p.name}").get("id", p.stem)
        if pid in out:
            raise KnowledgeError(f"rules/runtimes/{p.name}: runtime profile id {pid!r} is also declared by {out[pid]}")
        out[pid] = p.name
    return MappingProxyType(out)


def runtime_ids() -> list[str]:
    return sorted(_files())


@cache
def default_runtime_id() -> str:
    """The profile marked `default = true` (exactly one): what `--runtime` means when it is not given."""
    marked = [pid for pid, name in _files().items() if top_level(f"runtimes/{name}").get("default") is True]
    if len(marked) != 1:
        raise KnowledgeError(f"rules/runtimes: exactly one profile must set `default = true`, found {marked or 'none'}")
    return marked[0]


def runtime(profile_id: str | None = None) -> Runtime:
    """A runtime profile by id; the default profile for None."""
    return _runtime(profile_id or default_runtime_id())


@cache
def _runtime(pid: str) -> Runtime:
    files = _files()
    if pid not in files:
        raise UsageError(f"unknown runtime profile {pid!r}; choose one of: {', '.join(runtime_ids())}")
    return build_file(f"runtimes/{files[pid]}", parse, "runtime/1")


def runtime_for_image(image: str) -> Runtime | None:
    """The profile whose image reference matches a `docker run` image (same repository and tag)."""
    for rid in runtime_ids():
        rt = runtime(rid)
        if rt.image == image:
            return rt
    return None
