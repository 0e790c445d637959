"""rules/kernels.toml: the kernel family vLLM picks per scheme, layer kind and GPU capability (applied by
ckpt_tools/kernels.py)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..model.schemes import Scheme
from ._load import REQUIRED, Table, build_file

SCHEME_KINDS = ("nvfp4", "mxfp4", "mxfp8", "fp8", "int4", "int8")
LAYER_KINDS = ("linear", "moe")


@dataclass(frozen=True)
class Pick:
    """A condition on the GPU (and the config's group size) and the kernel family it selects."""

    kernel: str | None  # None: the hardware profile's `hardware_key` names it
    capabilities: frozenset[int] = frozenset()
    min_capability: int | None = None
    max_capability: int | None = None
    group_sizes: frozenset[int] | None = None
    text_model_types: frozenset[str] | None = None  # the text config's model_type, where vLLM decides by model
    fallback: str | None = None

    def matches(self, cc: int, group_size: int | None, text_model_type: str | None = None) -> bool:
        if self.text_model_types is not None and text_model_type not in self.text_model_types:
            return False
        if self.capabilities and cc not in self.capabilities:
            return False
        if self.min_capability is not None and cc < self.min_capability:
            return False
        if self.max_capability is not None and cc > self.max_capability:
            return False
        # An unknown group size is given the benefit of the doubt: the fast kernel's other conditions decide.
        return self.group_sizes is None or group_size is None or group_size in self.group_sizes


@dataclass(frozen=True)
class Selection:
    id: str
    scheme: str
    layer: str
    activations: frozenset[str] | None
    details: frozenset[str] | None
    methods: frozenset[str] | None
    input_types: frozenset[str] | None  # the config group's input_activations.type (`int`, `float`)
    hardware_key: str | None
    no_kernel: str
    source: str
    picks: tuple[Pick, ...]

    def covers(self, scheme: Scheme, layer: str, method: str | None = None, input_type: str | None = None) -> bool:
        return (
            scheme.kind == self.scheme
            and (self.methods is None or method in self.methods)
            and (self.input_types is None or input_type in self.input_types)
            and layer == self.layer
            and (self.activations is None or scheme.activation in self.activations)
            # A hostile config can put any JSON value in a scheme's detail: only strings match.
            and (self.details is None or (isinstance(scheme.detail, str) and scheme.detail in self.details))
        )


@dataclass(frozen=True)
class ForcedBackends:
    """What a forced `--linear-backend` / `--moe-backend` can run on NVFP4 layers (`[forced_backends]`)."""

    w4a4_only_linear: frozenset[str]  # linear backends that run W4A4 only
    weight_only_moe: frozenset[str]  # MoE backends that run weight-only (A16) NVFP4 experts
    fp4_tensor_core_moe: frozenset[str]  # MoE backends that need FP4 tensor cores
    source: str


@dataclass(frozen=True)
class KernelTable:
    vllm_version: str  # the release whose selection the table restates
    runtimes: frozenset[str]  # the runtime profiles that run that release's selection
    selections: tuple[Selection, ...]
    forced_backends: ForcedBackends


def _pick(t: Table) -> Pick:
    return Pick(
        kernel=t.opt_string("kernel"),
        capabilities=frozenset(t.ints("capabilities")),
        min_capability=t.opt_integer("min_capability"),
        max_capability=t.opt_integer("max_capability"),
        group_sizes=frozenset(t.ints("group_sizes")) if t.has("group_sizes") else None,
        text_model_types=frozenset(t.strs("text_model_types")) if t.has("text_model_types") else None,
        fallback=t.opt_string("fallback"),
    )


def _selection(t: Table) -> Selection:
    def opt_set(key: str) -> frozenset[str] | None:
        return frozenset(t.strs(key)) if t.has(key) else None

    return Selection(
        id=t.string("id"),
        scheme=t.choice("scheme", SCHEME_KINDS),
        layer=t.choice("layer", LAYER_KINDS),
        activations=opt_set("activations"),
        details=opt_set("details"),
        methods=opt_set("methods"),
        input_types=opt_set("input_types"),
        hardware_key=t.opt_string("hardware_key"),
        no_kernel=t.string("no_kernel"),
        source=t.string("source"),
        picks=t.each("pick", _pick),
    )


def _forced(t: Table) -> ForcedBackends:
    return ForcedBackends(
        w4a4_only_linear=frozenset(t.strs("w4a4_only_linear")),
        weight_only_moe=frozenset(t.strs("weight_only_moe")),
        fp4_tensor_core_moe=frozenset(t.strs("fp4_tensor_core_moe")),
        source=t.string("source"),
    )


def parse(root: Table) -> KernelTable:
    return KernelTable(
        root.string("vllm_version"),
        frozenset(root.strs("runtimes", REQUIRED)),
        root.each("selection", _selection, required=True),
        _forced(root.table("forced_backends")),
    )


@cache
def kernel_table() -> KernelTable:
    return build_file("kernels.toml", parse, "kernels/1")
