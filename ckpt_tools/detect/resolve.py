"""Resolve a checkpoint the way vLLM does: which config wins, the `--quantization` method, whether the runtime
accepts the algo, and the scheme vLLM builds for every linear layer and expert projection.

Ground truth: the vLLM 0.33.0 release, restated in docs/reference/vllm-0.33.md sections 1 (method resolution), 2 (compressed-tensors), 3 (ModelOpt). The runtime's
accepted values come from its profile in `rules/runtimes/`, so an image profile can differ from upstream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from itertools import chain, filterfalse
from operator import itemgetter
from types import MappingProxyType
from typing import Any, NamedTuple

from ..knowledge import quant_formats as format_table
from ..knowledge.architectures import Family, family_for, markers
from ..knowledge.modules import model_config, model_unquantized
from ..knowledge.quant_formats import format_for, unsupported_hints
from ..knowledge.runtimes import Runtime
from ..knowledge.runtimes import runtime as load_runtime
from ..model.checkpoint import Checkpoint
from ..model.modules import COMPRESSED_TENSORS_SUFFIXES, Module
from ..model.schemes import UNQUANTIZED, Scheme
from . import quant_formats
from .matching import CtMatcher, RegexBudget, ct_entry_matches, modelopt_excluded_by, modelopt_patterns
from .schemes import ct_scheme, disk_scheme, modelopt_scheme

# Formats whose per-layer schemes detect/quant_formats.py builds (rules/formats.toml); `fp8` has its own resolver below.
FORMAT_PRODUCERS = frozenset({"gptq", "awq", "auto-round", "quark", "fbgemm_fp8", "mxfp4"})


class ModuleRow(NamedTuple):
    """One linear layer or expert projection: what vLLM builds for it (declared) and what the tensors are (disk).

    An immutable record like the frozen dataclasses elsewhere, but a tuple: detection makes one per module (tens of
    thousands on a big MoE), without a frozen `__init__` each."""

    name: str
    component: str
    declared: Scheme
    disk: Scheme
    covered_by: str | None  # the ignore / exclude entry that keeps it unquantized, if any
    group: str | None  # the config group (compressed-tensors) or algo (ModelOpt) that quantizes it

    @property
    def is_expert(self) -> bool:
        return ".experts." in self.name


@dataclass(frozen=True)
class RowClass:
    """Rows that share every field but the name, and one layout (`Checkpoint.layouts`): judge the class once, then
    name its members. Every member has the same layer kind (all expert projections of one experts prefix and
    projection, or a single module), so a verdict that reads a row's fields, its layout or whether it is an expert
    holds for each member."""

    layout: int
    component: str
    declared: Scheme
    disk: Scheme
    covered_by: str | None
    group: str | None
    names: tuple[str, ...]  # sorted; never empty

    @property
    def is_expert(self) -> bool:
        return ".experts." in self.names[0]

    @property
    def row(self) -> ModuleRow:
        """The first member's row: every field but the name is the whole class's."""
        return ModuleRow(self.names[0], self.component, self.declared, self.disk, self.covered_by, self.group)

    def rows(self, names: Iterable[str] | None = None) -> list[ModuleRow]:
        """The rows of `names` (members of this class; default all of them)."""
        shared = (self.component, self.declared, self.disk, self.covered_by, self.group)
        return [ModuleRow(name, *shared) for name in (self.names if names is None else names)]


@dataclass(frozen=True)
class QuantConfigView:
    """The quantization config vLLM will use, and where it came from."""

    data: Mapping[str, Any] | None
    source: str | None  # "config.json", "config.json:text_config", "hf_quant_config.json", ...

    @property
    def nested(self) -> Mapping[str, Any] | None:
        q = (self.data or {}).get("quantization")
        return q if isinstance(q, dict) else None

    @property
    def file(self) -> str:
        """The file the config was read from (config.json when there is none)."""
        return (self.source or "config.json").split(":")[0]

    def get(self, key: str, default: Any = None) -> Any:
        """A key of the flat layout, falling back to the nested (`quantization: {...}`) layout."""
        data = self.data or {}
        if key in data:
            return data[key]
        nested = self.nested
        return nested.get(key, default) if nested else default


@dataclass(frozen=True)
class Detection:
    family: Family
    runtime: Runtime
    config: QuantConfigView
    producer: str
    quant_method: str | None  # the checkpoint's own normalised method, before any runtime check
    quant_algo: str | None
    vllm_quantization: str | None
    rejection: str | None  # vLLM's error text when it would refuse this checkpoint
    kv_cache: str | None
    components: tuple[str, ...] = ()
    made_by: str | None = None  # the tool that wrote the quantization config ("Intel AutoRound 0.16.1"), if known
    # One row per linear module, grouped into classes (every row in exactly one), sorted by first member: what a rule
    # judges once.
    classes: tuple[RowClass, ...] = field(default=(), repr=False)
    # Config regexes given up under their time budget (`matching.RegexBudget`): pattern -> why. CK304 reports them.
    slow_patterns: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def rows(self) -> tuple[ModuleRow, ...]:
        """Every linear module's row, sorted by name: the classes' members, each with its class's fields."""
        return tuple(sorted(chain.from_iterable(map(RowClass.rows, self.classes)), key=itemgetter(0)))

    @cached_property
    def row_by_name(self) -> Mapping[str, ModuleRow]:
        return dict(zip(map(itemgetter(0), self.rows), self.rows, strict=True))

    @cached_property
    def activation_mode(self) -> str | None:
        """What vLLM builds for the NVFP4 layers: the config decides W4A4 vs W4A16, whatever the tensors hold (a
        W4A4 config without input scales still builds W4A4, with uninitialised scales: CK401)."""
        return _nvfp4_mode((c.declared, len(c.names)) for c in self.classes)

    @property
    def disk_activation_mode(self) -> str | None:
        """What the tensors support: W4A4 only where every NVFP4 module carries an input global scale."""
        return _nvfp4_mode((c.disk, len(c.names)) for c in self.classes)


def _nvfp4_mode(schemes: Iterable[tuple[Scheme, int]]) -> str | None:
    """W4A4 / W4A16 / mixed over the NVFP4 ones of (scheme, modules) pairs; None when there is none."""
    a4 = a16 = 0
    for s, n in schemes:
        if s.kind == "nvfp4":
            if s.activation == "A4":
                a4 += n
            else:
                a16 += n
    if not a4 + a16:
        return None
    return "W4A4" if not a16 else "W4A16" if not a4 else "mixed"


# ---- which config vLLM reads --------------------------------------------------------------------------------------


def effective_quant_config(ckpt: Checkpoint) -> QuantConfigView:
    """vllm/transformers_utils/config.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.1): config.json `quantization_config` wins; hf_quant_config.json only when it is absent;
    then `compression_config`, then the multimodal `text_config` copies."""
    cfg = ckpt.config or {}
    if isinstance(cfg.get("quantization_config"), dict):
        return QuantConfigView(cfg["quantization_config"], "config.json")
    if isinstance(ckpt.hf_quant_config, dict):
        return QuantConfigView(ckpt.hf_quant_config, "hf_quant_config.json")
    if isinstance(cfg.get("compression_config"), dict):
        return QuantConfigView(cfg["compression_config"], "config.json:compression_config")
    text = cfg.get("text_config")
    if isinstance(text, dict):
        for key in ("quantization_config", "compression_config"):
            if isinstance(text.get(key), dict):
                return QuantConfigView(text[key], f"config.json:text_config.{key}")
    return QuantConfigView(None, None)


def _is_modelopt(view: QuantConfigView) -> bool:
    data = view.data or {}
    producer = data.get("producer")
    method = str(data.get("quant_method", "")).lower()
    return (
        (isinstance(producer, dict) and producer.get("name") == "modelopt")
        or method.startswith("modelopt")
        or (view.nested is not None and "quant_algo" in view.nested)
    )


def modelopt_algo(view: QuantConfigView) -> str | None:
    # vLLM ModelOptQuantConfigBase.from_config: `str(quant_algo).upper()` after a falsy check, so 7 reads "7".
    algo = view.get("quant_algo")
    return str(algo).upper() if algo else None


def _resolve_method(
    view: QuantConfigView, rt: Runtime, model_type: str | None = None
) -> tuple[str | None, str | None, str | None]:
    """(checkpoint quant_method, vllm --quantization value, rejection) following `_verify_quantization`."""
    data = view.data
    if data is None:
        return None, None, None
    if _is_modelopt(view):
        algo = modelopt_algo(view)
        if view.nested is not None and "quant_algo" in view.nested and "quant_method" not in data:
            # Nested layout: normalisation maps the algo to a method or raises (vllm/transformers_utils/config.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.1)).
            method = rt.quantization.modelopt_nested_algos.get(algo or "")
            if method is None:
                return "modelopt", None, f"Unknown ModelOpt quant algo: {algo}"
        else:
            method = "modelopt"
        # Overrides (vllm/model_executor/layers/quantization/__init__.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.2); vllm/config/model.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §1.5)): NVFP4/FP4 algos -> modelopt_fp4; FP8 exactly -> modelopt.
        if algo and ("NVFP4" in algo or "FP4" in algo):
            method = "modelopt_fp4"
        elif algo == "MXFP8":
            method = "modelopt_mxfp8"
        elif algo == "MIXED_PRECISION":
            method = "modelopt_mixed"
        if algo is None:
            return "modelopt", None, "Missing 'quant_algo' in quantization config"
        if algo not in rt.quantization.modelopt_algos:
            supported = list(rt.quantization.modelopt_algos)
            return (
                "modelopt",
                None,
                (
                    f"ModelOpt currently only supports: {supported} quantizations in vLLM. Please check the "
                    f"`hf_quant_config.json` file for your model's quant configuration. (quant_algo {algo})"
                ),
            )
        problem = _modelopt_from_config_problem(view, algo, rt)
        if problem:
            return "modelopt", None, problem
        return "modelopt", method, None
    method = str(data.get("quant_method", "")).lower().replace("compressed_tensors", "compressed-tensors")
    if method == "mxfp8":
        method = "modelopt_mxfp8"
    if not method:
        return None, None, "quantization_config has no quant_method"
    fmt = format_for(method)
    if fmt is not None:
        # The config class's override_quantization_method renames the method (gptq -> auto_gptq, awq -> auto_awq,
        # auto-round -> inc), then from_config validates it (rules/formats.toml).
        vllm_method, problem = quant_formats.resolve_method(method, data, rt.quantization.methods, model_type)
        return method, vllm_method, problem
    if method == "compressed-tensors":
        sparsity = data.get("sparsity_config")
        rejected = rt.quantization.sparsity_rejection
        if rejected and isinstance(sparsity, dict) and sparsity.get("targets"):
            return method, None, rejected
    if method not in rt.quantization.methods:
        hint = unsupported_hints().get(method)
        return method, None, f"Unknown quantization method: {method}" + (f" ({hint})" if hint else "")
    return method, method, None


def _modelopt_from_config_problem(view: QuantConfigView, algo: str | None, rt: Runtime) -> str | None:
    if algo in ("NVFP4", "W4A16_NVFP4") and view.nested is not None and "quant_method" not in (view.data or {}):
        missing = [k for k in rt.quantization.modelopt.nvfp4_nested_required if k not in view.nested]
        if missing:
            return f"NVFP4 quantization requires the following fields in hf_quant_config.json: {missing}"
    if algo == "MIXED_PRECISION" and not view.get("quantized_layers"):
        return "MIXED_PRECISION quant_algo requires a non-empty 'quantized_layers' mapping in the quantization config."
    return None


def _ct_groups(view: QuantConfigView) -> list[tuple[str, dict[str, Any]]]:
    groups = (view.data or {}).get("config_groups")
    if not isinstance(groups, dict):
        return []
    out = []
    for name, group in groups.items():
        if not isinstance(group, dict):
            continue
        targets = group.get("targets") or []
        if isinstance(targets, str):
            targets = [targets]
        # Attention-only groups are dropped: "Attention quant is coupled with KV-cache quantization" (2.1).
        if len(targets) == 1 and isinstance(targets[0], str) and targets[0].endswith("Attention"):
            continue
        out.append((str(name), group))
    return out


def _modelopt_downgraded(view: QuantConfigView) -> bool:
    """ModelOptNvFp4Config._from_config: NVFP4 whose config groups all have null input activations -> W4A16."""
    groups = (view.data or {}).get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return False
    return all(isinstance(g, dict) and g.get("input_activations") is None for g in groups.values())


def _kv_cache(view: QuantConfigView, producer: str) -> str | None:
    kv = view.get("kv_cache_scheme")
    if kv is None:
        kv = view.get("kv_cache_quant_algo")
    if isinstance(kv, dict):
        bits, typ = kv.get("num_bits"), kv.get("type")
        if typ == "float" and bits == 8:
            return "fp8"
        if typ == "float" and bits == 4:
            return "nvfp4"
        if typ == "int" and bits == 8:
            return "int8"
        return f"{typ}{bits}"
    if isinstance(kv, str) and kv:
        return kv.lower()
    return None


# ---- per-module schemes -------------------------------------------------------------------------------------------


def is_linear_candidate(module: Module) -> bool:
    """A module vLLM builds as a linear layer or expert projection: a 2-D (possibly packed) weight, not an embedding."""
    w = module.weight
    if w is None:
        return False
    if len(w.shape) != 2:
        # gpt-oss fused experts: `*_blocks` [E, rows, cols/32, 16], one module for the whole expert bank
        return len(w.shape) == 4 and w.name.endswith("_proj_blocks")
    return not model_config().is_embedding(module.name.rsplit(".", 1)[-1])


def component_of(name: str, family: Family) -> str:
    hit = family.root_of(name)
    if hit is not None:
        return _rooted_component(hit[0].component, name[len(hit[1]) :].split(".", 1)[0])
    segments = name.split(".")
    for comp, segs in markers().items():
        if any(s in segs for s in segments):
            return comp
    return "other"


def component_fixed_by(prefix: str, family: Family) -> bool:
    """Whether `component_of` answers the same for every name below `prefix`: a root prefix decides, and the root
    and the segment after it both lie within the first four segments, which `prefix` then holds."""
    return prefix.count(".") >= 3 and family.root_of(prefix + ".") is not None


def _head(prefix: str) -> str:
    """A module prefix's first four segments (all of a shorter one): the head `component_fixed_by` judges."""
    return ".".join(prefix.split(".", 4)[:4])


def component_lookup(family: Family) -> Callable[[str], str]:
    """`component_of` for many names (every tensor of a checkpoint): the names of one module share the answer when
    its four-segment head fixes it (`component_fixed_by`), so most names cost one dictionary lookup and
    `component_of` runs about once per layer."""
    heads: dict[str, str | None] = {}  # four-segment head -> the component of every name below it, or None
    shared: dict[str, str | None] = {}  # module prefix -> its names' component, or None when each name decides

    def of_module(prefix: str, name: str) -> str | None:
        if prefix.count(".") < 3:
            return None
        head = _head(prefix)
        if head not in heads:
            heads[head] = component_of(name, family) if component_fixed_by(head, family) else None
        return heads[head]

    def lookup(name: str) -> str:
        prefix = name.rpartition(".")[0]
        if prefix not in shared:
            shared[prefix] = of_module(prefix, name)
        component = shared[prefix]
        return component if component is not None else component_of(name, family)

    return lookup


def module_components(modules: Mapping[str, Module], family: Family) -> set[str]:
    """The components of every tensor name of `modules` (`component_of` of each). WHY once per four-segment head
    where the head fixes them: `component_fixed_by` says `component_of` then answers the same for every name below
    the head, so one name of the first module under it answers for all."""
    prefixes = list(modules)
    heads = [_head(prefix) for prefix in prefixes]
    first = dict(zip(reversed(heads), reversed(prefixes), strict=True))  # head -> the first module under it
    found: set[str] = set()
    undecided: set[str] = set()  # heads whose names each decide
    for head, prefix in first.items():
        if component_fixed_by(head, family):  # four segments at least, below a root
            found.add(component_of(next(iter(modules[prefix].tensors.values())).name, family))
        else:
            undecided.add(head)  # a short prefix is its own head (`split` gave fewer than four segments)
    for prefix, head in zip(prefixes, heads, strict=True):
        if head in undecided:
            found.update(component_of(t.name, family) for t in modules[prefix].tensors.values())
    return found


def tensor_components(ckpt: Checkpoint, family: Family) -> AbstractSet[str]:
    """`module_components(ckpt.modules, family)`."""
    return module_components(ckpt.modules, family)


@lru_cache(maxsize=4096)
def _rooted_component(root_component: str, first: str) -> str:
    # A marker directly below a root (model.language_model.visual.*) names the component the tensor really is.
    for comp, segs in markers().items():
        if first in segs:
            return comp
    return root_component


class _Resolver:
    def __init__(
        self,
        ckpt: Checkpoint,
        view: QuantConfigView,
        family: Family,
        rt: Runtime,
        producer: str,
        algo: str | None,
        method: str | None = None,
    ) -> None:
        self.ckpt, self.view, self.family, self.rt, self.producer, self.algo = ckpt, view, family, rt, producer, algo
        entries = view.get("ignore") or view.get("exclude_modules") or []
        self.ignore = [e for e in entries if isinstance(e, str)] if isinstance(entries, list) else []
        self.groups = _ct_groups(view) if producer == "compressed-tensors" else []
        self.regex_budget = RegexBudget()  # shared by a carried copy: a pattern given up stays given up
        self.ignore_matcher = (
            CtMatcher(self.ignore, family, self.regex_budget) if producer == "compressed-tensors" else None
        )
        self.mo_patterns = modelopt_patterns(self.ignore, family) if producer == "modelopt" else []
        self.always_unquantized = rt.quantization.modelopt.always_unquantized
        self.cache: dict[str, tuple[Scheme, str | None, str | None]] = {}
        self.method = method  # the checkpoint's quant_method; "fp8" is decided by vLLM's Fp8Config
        self.forced_unquantized = self._applicable_forced_unquantized()
        # Modules the model file builds without a quant config whatever the config says (rules/modules.toml).
        self.forced: dict[str, str] = {}
        if producer == "modelopt":
            base = modelopt_scheme(algo)
            if algo == "NVFP4" and _modelopt_downgraded(view):
                base = Scheme("nvfp4", "A16", "downgraded: input_activations null")
            self.modelopt_base = base
            layers = view.get("quantized_layers")
            self.mixed_layers = layers if isinstance(layers, dict) else {}

    def declared(self, module: Module) -> tuple[Scheme, str | None, str | None]:
        forced = self.forced.get(module.name)
        if forced is not None:
            return UNQUANTIZED, forced, None
        where = module.expert
        if where is None:
            return self.declared_at(module.name, None)
        return self.declared_at(f"{where[0]}.0.{where[2]}", where[0])

    def declared_at(self, key: str, experts_prefix: str | None) -> tuple[Scheme, str | None, str | None]:
        """The scheme vLLM builds at `key`: a module's name, or for an expert projection expert 0's name under its
        experts prefix: vLLM resolves a fused MoE layer once, on expert 0's projection names
        (vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py,
        vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.4)), so every expert of a layer gets its answer."""
        hit = self.cache.get(key)
        if hit is None:
            # A module nested under another component's root (misnested-prefix) has no layer of its own in vLLM;
            # the layer vLLM builds for it is where it belongs, and the config resolves that one.
            at = self.family.belongs_at(key) or key
            moved_prefix = experts_prefix and (self.family.belongs_at(experts_prefix) or experts_prefix)
            hit = self.cache[key] = self._declared(at, moved_prefix)
        return hit

    def find_forced(self, names: Iterable[str]) -> None:
        """Fill `forced` (module name -> why the model builds it unquantized) for `names`: the first pattern that
        matches a name gives its reason."""
        for name in names:
            for pattern, reason in self.forced_unquantized:
                if pattern.search(name):
                    self.forced[name] = f"(built unquantized by vLLM: {reason})"
                    break

    def _applicable_forced_unquantized(self) -> list:
        """The rules/modules.toml entries that apply to this family, producer and config, decided once."""
        if self.producer not in ("modelopt", "compressed-tensors") and self.method != "fp8":
            return []
        out = []
        for entry in model_unquantized():
            if entry.families and self.family.id not in entry.families:
                continue
            if self.ckpt.architecture in entry.except_architectures:
                continue
            if entry.producers and self.producer not in entry.producers:
                continue
            if entry.when_config and not any(self.ckpt.config_value(k) for k in entry.when_config):
                continue
            out.append((entry.pattern, entry.reason))
        return out

    def _declared(self, name: str, experts_prefix: str | None) -> tuple[Scheme, str | None, str | None]:
        if self.producer == "compressed-tensors":
            return self._ct(name)
        if self.producer == "modelopt":
            return self._modelopt(name, experts_prefix)
        if self.method == "fp8":
            return self._fp8(name, experts_prefix)
        if self.producer in FORMAT_PRODUCERS:
            module = self.ckpt.modules.get(name)
            disk_q = module is not None and disk_scheme(module).quantized
            scheme, covered = quant_formats.declared_scheme(
                self.producer, self.view.data or {}, name, self.family.to_vllm(name), disk_q, self.regex_budget
            )
            return scheme, covered, (self.producer if scheme.quantized else None)
        return UNQUANTIZED, None, None

    def _fp8(self, name: str, experts_prefix: str | None) -> tuple[Scheme, str | None, str | None]:
        """vLLM `Fp8Config.get_quant_method` (quant_method "fp8", e.g. DeepSeek-style block FP8): every linear layer
        and expert group is FP8 W8A8 unless `ignored_layers` (else `modules_to_not_convert`) names it exactly, after
        the HF->vLLM rename; the LM head is a ParallelLMHead, which Fp8Config leaves unquantized. Found by
        bench/conformance (vLLM 0.33.0 fp8.py)."""
        if name == "lm_head" or name.endswith(".lm_head"):
            return UNQUANTIZED, "(lm_head: Fp8Config quantizes linear layers only)", None
        entries = self.view.get("ignored_layers") or self.view.get("modules_to_not_convert") or []
        ignored = (
            {self.family.to_vllm(e): e for e in entries if isinstance(e, str)} if isinstance(entries, list) else {}
        )
        for candidate in (name, experts_prefix):
            if candidate is not None and self.family.to_vllm(candidate) in ignored:
                return UNQUANTIZED, ignored[self.family.to_vllm(candidate)], None
        block = self.view.get("weight_block_size")
        return Scheme("fp8", "A8", "block" if block else None), None, "fp8"

    def _ct(self, name: str) -> tuple[Scheme, str | None, str | None]:
        vname = self.family.to_vllm(name)
        hit = self.ignore_matcher.first(vname) if self.ignore_matcher is not None else None
        if hit is not None:
            return UNQUANTIZED, hit, None
        is_head = name.rsplit(".", 1)[-1] == "lm_head" or name == "lm_head"
        for gname, group in self.groups:
            targets = group.get("targets") or []
            if isinstance(targets, str):
                targets = [targets]
            for target in targets:
                if not isinstance(target, str):
                    continue
                if target.startswith("re:") or "." in target or target == name:
                    if ct_entry_matches(target, vname, self.family, self.regex_budget):
                        break
                elif "linear" in target.lower() and not is_head:
                    break
            else:
                continue
            fmt = group.get("format") or (self.view.data or {}).get("format")
            return ct_scheme(group.get("weights"), group.get("input_activations"), fmt), None, gname
        return UNQUANTIZED, None, None

    def _modelopt(self, name: str, experts_prefix: str | None) -> tuple[Scheme, str | None, str | None]:
        vname = self.family.to_vllm(name)
        for marker in self.always_unquantized:
            if marker in vname:
                return UNQUANTIZED, f"(always unquantized: {marker})", None
        hit = modelopt_excluded_by(self.mo_patterns, vname)
        if hit is None and experts_prefix is not None:
            hit = modelopt_excluded_by(self.mo_patterns, self.family.to_vllm(experts_prefix))
        if hit is not None:
            return UNQUANTIZED, hit, None
        if self.algo == "MIXED_PRECISION":
            # ModelOptMixedPrecisionConfig._resolve_quant_algo: the layer's own prefix first; a FusedMoE layer is
            # looked up by its experts prefix (`model.layers.N.mlp.experts`), which ModelOpt writes as the key of
            # the whole expert bank.
            entry = self.mixed_layers.get(name) or self.mixed_layers.get(name.rsplit(".", 1)[0])
            if entry is None and experts_prefix is not None:
                entry = self.mixed_layers.get(experts_prefix)
            if not isinstance(entry, dict):
                return UNQUANTIZED, None, None
            algo = str(entry.get("quant_algo", "")).upper()
            return modelopt_scheme(algo), None, algo
        return self.modelopt_base, None, self.algo


def detect(ckpt: Checkpoint, runtime_id: str | None = None) -> Detection:
    rt = load_runtime(runtime_id)
    family = family_for(ckpt.architecture, ckpt.model_type)
    view = effective_quant_config(ckpt)
    method, vllm_method, rejection = _resolve_method(view, rt, ckpt.model_type)

    if view.data is None:
        producer = "none"
    elif _is_modelopt(view) or (method or "").startswith("modelopt"):
        producer = "modelopt"
    elif method == "compressed-tensors":
        producer = "compressed-tensors"
    elif method in FORMAT_PRODUCERS or method in format_table.formats():
        producer = method or "unknown"
    else:
        producer = "unknown"
    algo = modelopt_algo(view) if producer == "modelopt" else None

    resolver = _Resolver(ckpt, view, family, rt, producer, algo, method)
    classes, found_components = _row_classes(ckpt, family, resolver)
    slow = resolver.regex_budget.slow

    # Judged per class: every row has its class's schemes, and the classes hold every row. The first row in name
    # order with an unknown declared scheme is the first member of the first such class (classes are sorted by
    # first member, their members by name); `_ct_algo` reads only which schemes occur.
    if producer == "none" and any(c.disk.quantized for c in classes):
        producer = _producer_from_tensors(ckpt)
    if producer == "compressed-tensors" or producer in format_table.formats():
        algo = _ct_algo([c.declared for c in classes if c.declared.quantized])
    if producer == "compressed-tensors" and rejection is None:
        bad = next((c for c in classes if c.declared.kind == "unknown"), None)
        if bad is not None:
            rejection = (
                "No compressed-tensors compatible scheme was found for "
                f"layer_name={bad.names[0]}: {bad.declared.detail}"
            )
            vllm_method = None

    comps = sorted(found_components, key=lambda c: (c != "text", c))
    return Detection(
        family=family,
        runtime=rt,
        config=view,
        producer=producer,
        quant_method=method,
        quant_algo=algo,
        vllm_quantization=vllm_method,
        rejection=rejection,
        kv_cache=_kv_cache(view, producer),
        components=tuple(comps),
        made_by=quant_formats.made_by(view.data),
        classes=tuple(classes),
        slow_patterns=MappingProxyType(dict(slow)),
    )


def _row_classes(ckpt: Checkpoint, family: Family, resolver: _Resolver) -> tuple[list[RowClass], set[str]]:
    """The rows of every linear module, as classes sorted by first member, and the components of all modules.

    Expert projections are judged per (experts prefix, projection, layout), on the members `Checkpoint.experts`
    files under them. WHY every member gets the same row but its name:
    - declared scheme, covered_by, group: vLLM resolves the layer on expert 0's name (`declared_at`); only the
      model file's forced-unquantized patterns read the member's own name, and they are matched per name first;
    - disk scheme and whether the weight is a linear one: the layout's alone;
    - embedding or not (a 2-D weight): the projection name, the member's last segment;
    - component: fixed by the experts prefix when `component_fixed_by` says so, else found per member.
    Every other module (and any expert module `Checkpoint.experts` does not hold, e.g. `experts.01` beside
    `experts.1`) is judged on its own."""
    modules = ckpt.modules
    resolver.find_forced(modules)
    out, found, claimed = _expert_classes(ckpt, family, resolver)
    for name in filterfalse(claimed.__contains__, modules):
        component, row_class = _module_class(ckpt, family, resolver, name)
        found.add(component)
        if row_class is not None:
            out.append(row_class)
    out.sort(key=lambda c: c.names[0])
    return out, found


def _module_class(ckpt: Checkpoint, family: Family, resolver: _Resolver, name: str) -> tuple[str, RowClass | None]:
    """(the component of a module judged on its own, its one-member class or None when it is no linear layer)."""
    module = ckpt.modules[name]
    component = component_of(name + "." if name else "", family)
    if not is_linear_candidate(module):
        return component, None
    judged = resolver.declared(module)
    row_component = component if name else component_of(".", family)
    row = RowClass(ckpt.layouts.of[name], row_component, judged[0], disk_scheme(module), judged[1], judged[2], (name,))
    return component, row


def _expert_classes(ckpt: Checkpoint, family: Family, resolver: _Resolver) -> tuple[list[RowClass], set[str], set[str]]:
    """The classes of the expert projections `ckpt.experts` files, their components, and the module names they
    claim (`_row_classes`)."""
    modules = ckpt.modules
    of = ckpt.layouts.of
    forced = resolver.forced
    found: set[str] = set()
    out: list[RowClass] = []

    def emit(lid: int, component: str, disk: Scheme, names: list[str], judged: tuple) -> None:
        out.append(RowClass(lid, component, judged[0], disk, judged[1], judged[2], tuple(names)))

    claimed: set[str] = set()
    for prefix, group in ckpt.experts.items():
        fixed = component_fixed_by(prefix, family)
        banks = list(group.experts.values())  # {projection -> module}, per expert
        for proj in sorted(set().union(*banks)):
            names = [bank[proj].name for bank in banks if proj in bank]
            claimed.update(names)
            by_lid: dict[int, list[str]] = {}
            for name in names:
                by_lid.setdefault(of[name], []).append(name)
            if fixed:
                shared = component_of(names[0] + ".", family)
                found.add(shared)
            else:
                each = {n: component_of(n + ".", family) for n in names}
                found.update(each.values())
            for lid, lid_names in by_lid.items():
                first = modules[lid_names[0]]
                if not is_linear_candidate(first):
                    continue
                disk = disk_scheme(first)
                judged = resolver.declared_at(f"{prefix}.0.{proj}", prefix)
                by_component = {shared: lid_names} if fixed else {}
                if not fixed:
                    for n in lid_names:
                        by_component.setdefault(each[n], []).append(n)
                for component, same in by_component.items():
                    hit = forced.keys() & same if forced else ()
                    if hit:
                        for n in sorted(hit):
                            emit(lid, component, disk, [n], (UNQUANTIZED, forced[n], None))
                        same = [n for n in same if n not in hit]
                    if same:
                        emit(lid, component, disk, sorted(same), judged)
    return out, found, claimed


def _producer_from_tensors(ckpt: Checkpoint) -> str:
    suffixes = {name.rsplit(".", 1)[-1] for name in ckpt.tensors}
    if suffixes & COMPRESSED_TENSORS_SUFFIXES:
        return "compressed-tensors"
    if suffixes & {"weight_scale_2", "pre_quant_scale"}:
        return "modelopt"
    return "unknown"


def _ct_algo(schemes: list[Scheme]) -> str | None:
    names = set()
    for s in schemes:
        if s.kind == "nvfp4":
            names.add("NVFP4" if s.activation == "A4" else "W4A16_NVFP4")
        elif s.kind in ("fp8", "mxfp8", "mxfp4"):
            names.add(s.kind.upper())
        elif s.kind in ("int4", "int8"):
            names.add(f"W{s.kind[3:]}{s.activation or 'A16'}")
        else:
            names.add("UNKNOWN")
    if not names:
        return None
    return names.pop() if len(names) == 1 else "MIXED_PRECISION"
