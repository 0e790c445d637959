"""The load model: rules/loader.toml and rules/scales.toml applied to a checkpoint, as vLLM's weight loader would
apply its own code (docs/reference/load-model.md). One pass over the checkpoint's modules gives every tensor's fate
and every parameter's fill, as a `LoadAccounting` with judge `model`.

What it builds per module: the parameters of the quantization method's scale table for the scheme the config
declares (detection's rows), an unquantized linear's `weight`, or the embedding the model class builds. Modules it
has no knowledge of (norms, convolutions, layers of a method rules/loader.toml does not list) are accounted as
loaded into the parameter of the same name, unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from operator import methodcaller
from typing import Any

from ..detect.resolve import Detection, ModuleRow
from ..knowledge.architectures import Family
from ..knowledge.kv_scales import attention as kv_attention
from ..knowledge.kv_scales import classify, is_kv_scale_name, renaming
from ..knowledge.loader import EMBEDDING_TARGETS, Method, ModelClass, loader, methods_for, model_class
from ..knowledge.scales import ScaleScheme, TensorSpec, global_scales, scheme_for, schemes
from ..model.checkpoint import Checkpoint
from ..model.dimensions import config_features
from ..model.modules import Module, expert_of
from .accounting import LoadAccounting, ParameterFill, TensorFate

# The catalogue rules a defect the accounting finds may already name (`owner`): one verdict per defect. The load
# model sits below the rules (they apply it), so it names them by slug; tests/load checks each is a registered rule.
MISNESTED_PREFIX = "misnested-prefix"
KV_SCALE_NAMING = "kv-scale-naming"
IGNORE_LIST_MISMATCH = "ignore-list-mismatch"
ORPHAN_SCALE = "orphan-scale"
QUANT_CONFIG_MISMATCH = "quant-config-mismatch"
NVFP4_WEIGHT_ONLY = "nvfp4-weight-only"
MOE_EXPERT_MISSING_SCALE = "moe-expert-missing-scale"
SCALE_SHAPE_MISMATCH = "scale-shape-mismatch"
PACKED_LAYOUT_MISMATCH = "packed-layout-mismatch"

_INT_BITS = {"int4": 4, "int8": 8}
# Tensor suffixes that may be KV-cache scales (rules/kv_scales.toml attention.scale_suffixes, plus a projection's
# output_scale): their modules are judged one by one.
_KV_SUFFIXES = frozenset({*kv_attention().scale_suffixes, "output_scale"})
# The producers whose layers built against their storage (quantized vs not) ignore-list-mismatch (CK301) reports;
# the load model leaves those layers to it, so a defect gets one verdict.
_IGNORE_LIST_PRODUCERS = ("modelopt", "compressed-tensors")


def load_accounting(ckpt: Checkpoint, det: Detection, *, every_tensor: bool = True) -> LoadAccounting:
    """What vLLM's loader does with every tensor of `ckpt` under the detected config and runtime.

    With `every_tensor=False` (what the CK6xx rules need) the accounting holds only what is not a plain load: the
    skipped and fatal tensors, the loads with a problem, and the parameters left unfilled without a default. Those are
    the same entries
    the whole accounting has (`_Model.problems` says why)."""
    arch = _architecture(ckpt)
    judge = judged_by(det)
    if det.rejection is not None:  # the config is refused before any layer is built
        return LoadAccounting("model", judge, arch, build_error=det.rejection)
    model = _Model(ckpt, det, model_class(arch))
    if every_tensor:
        model.rows.update((n, c.row) for c in det.classes for n in c.names)
        for name, module in ckpt.modules.items():
            model.module(name, module)
    else:
        model.problems()
    if model.build_errors:
        return LoadAccounting("model", judge, arch, build_error="; ".join(model.build_errors))
    fates, fills = tuple(model.fates), model.fills()
    if not every_tensor:
        fates = tuple(f for f in fates if f.fate != "loaded" or f.problem is not None)
        fills = tuple(p for p in fills if (not p.filled or p.partial) and p.default is None)
    return LoadAccounting(judge="model", judged_by=judge, architecture=arch, tensors=fates, parameters=fills)


def judged_by(det: Detection) -> str:
    """`vLLM 0.33.0`, or, under a runtime profile of another release, which release's loader judged it."""
    release, version = loader().release, det.runtime.vllm_version
    return f"vLLM {release}" if version == release else f"vLLM {release} (runtime {det.runtime.id} is vLLM {version})"


def _architecture(ckpt: Checkpoint) -> str | None:
    archs = (ckpt.config or {}).get("architectures")
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None


def vllm_name(family: Family, mc: ModelClass, name: str) -> str | None:
    """A checkpoint name (or prefix) as vLLM's loader sees it: the family's hf_to_vllm_mapper, then the model
    class's own text-model mapper (`inner_prefix_map`); None when the mapper drops it."""
    if any(name.startswith(p) for p in family.dropped_prefixes):
        return None
    for old, new in family.vllm_prefix_map:
        if name.startswith(old):
            name = new + name[len(old) :]
            break
    for old, new in mc.inner_prefix_map:
        if name.startswith(old):
            return new + name[len(old) :]
    return name


def maps_back(ckpt: Checkpoint, det: Detection, old: str, new: str) -> bool:
    """Whether vLLM's mappers bring names under prefix `old` to where names under `new` go (a doubled
    `model.language_model.` on Qwen3.5, which its text model strips again): vLLM then loads them where they belong."""
    mc = model_class(_architecture(ckpt))
    return vllm_name(det.family, mc, old) == vllm_name(det.family, mc, new)


@dataclass(frozen=True)
class _Built:
    """The parameters vLLM registers for one module: suffix -> spec (None for an unquantized parameter), the ones a
    tensor must fill, the ones the layer never reads (filled or not), and what it is, for messages."""

    params: Mapping[str, TensorSpec | None]
    must_fill: frozenset[str]
    unused: frozenset[str]
    what: str
    scheme: ScaleScheme | None = None
    bits: int | None = None


# What the load model knows of a module it has no knowledge of (a norm, a convolution): nothing but its name.
_UNMODELLED = _Built({}, frozenset(), frozenset(), "the layer")


@dataclass
class _Param:
    name: str
    spec: TensorSpec | None
    expected: set[str] = field(default_factory=set)  # shard ids a tensor must fill ("" for an unstacked one)
    filled: set[str] = field(default_factory=set)
    unused: bool = False
    note: str = ""
    owner: str | None = None  # the catalogue rule reporting this parameter's defect, whatever it is
    missing_owner: str | None = None  # the one reporting it when tensors are missing
    sources: dict[str, str] = field(default_factory=dict)  # shard id -> the checkpoint tensor that fills it


class _Model:
    def __init__(self, ckpt: Checkpoint, det: Detection, mc: ModelClass) -> None:
        self.ckpt, self.det, self.mc = ckpt, det, mc
        # The rows of the modules judged (all of them for the whole accounting, the classes with something to say
        # otherwise): filled from `Detection.classes` as they are met.
        self.rows: dict[str, ModuleRow] = {}
        self.family = det.family
        self.dropped = det.family.dropped_prefixes
        self.skip = loader().skip
        self.stacked = {shard: (fused, sid) for fused, shard, sid in mc.stacked}
        self.siblings: dict[str, list[tuple[str, str]]] = {}
        for fused, shard, sid in mc.stacked:
            self.siblings.setdefault(fused, []).append((shard, sid))
        self.unavailable = ckpt.unavailable_tensors
        self.experts = {proj: (fused, sid) for fused, proj, sid in mc.experts}
        self.fates: list[TensorFate] = []
        self.build_errors: list[str] = []
        self.params: dict[str, _Param] = {}
        self._built: dict[tuple[int, int, str | None, str | None], _Built | None] = {}
        self._scheme_by_id = {s.id: s for s in schemes()}
        cfg = det.config
        self.has_exclusions = any(cfg.get(k) for k in loader().exclusion_keys)
        self.kv_release = renaming(det.runtime.vllm_version)

    # ---- the problems only ---------------------------------------------------------------------------------------
    def problems(self) -> None:
        """Judge per row class, and module by module only where a class has something to say.

        WHY a class's first member speaks for all of them: the members of a class (`Detection.classes`) share the
        layout (every tensor's suffix, dtype and shape), the declared and on-disk schemes and the config group, which
        is all `built` and `judged` read, except the name. The name decides the parameter's name (not whether a
        tensor has one), the row-parallel error text (not whether the shape fits) and the in_features the packing
        is checked against, which members of equal stored shape share whenever the config agrees with their
        out_features. Modules whose verdict depends on their name or on other modules are judged one by one:
        embeddings, rotary caches, dropped prefixes, holders of KV-cache scales, and stacked projections (their
        fused parameter expects every sibling). Every other module outside a row class is loaded unchecked."""
        ckpt, modules = self.ckpt, self.ckpt.modules
        special = set(filter(methodcaller("endswith", (".embed_tokens", ".rotary_emb")), modules))
        special.update(self.misnested_modules(modules))
        if self.dropped:
            special.update(filter(methodcaller("startswith", tuple(self.dropped)), modules))
        layouts = ckpt.layouts
        for lid, layout in enumerate(layouts.layouts):
            if any(suffix in _KV_SUFFIXES for suffix, _, _ in layout):
                special.update(layouts.members[lid])
        for c in self.det.classes:
            first = modules[c.names[0]]
            stacked = not c.is_expert and c.names[0].rpartition(".")[2] in self.stacked
            if stacked or not special.isdisjoint(c.names) or self.speaks(c.row, first):
                self.rows.update((n, c.row) for n in c.names)
                special.update(c.names)
        for name in filter(special.__contains__, modules):  # in module order, as the whole accounting
            self.module(name, modules[name])

    def speaks(self, row: ModuleRow, module: Module) -> bool:
        """Whether a class whose first member is `module` has a fate or a fill to report."""
        self.rows[module.name] = row
        built = self.built(module.name, module)
        if built is None:
            return False
        if not built.must_fill <= module.suffixes:
            return True
        vname = self.vllm_name(module.name + ".")
        if vname is None:
            return True
        proj = module.name.rpartition(".")[2]
        return any(
            self.judged(f"{module.name}.{s}", vname[:-1], proj, s, t.dtype, t.shape, built, record=False).problem
            is not None
            for s, t in module.tensors.items()
        )

    # ---- names ---------------------------------------------------------------------------------------------------
    def vllm_name(self, name: str) -> str | None:
        """The name after the class's hf_to_vllm_mapper; None when the mapper drops it."""
        return vllm_name(self.family, self.mc, name)

    def relative(self, name: str) -> str:
        p = self.mc.inner_prefix
        return name[len(p) :] if p and name.startswith(p) else name

    def param_of(self, vname: str, proj: str, suffix: str) -> tuple[str, str]:
        """(vLLM parameter, shard id) a module's tensor goes into: stacked q/k/v and gate/up into their fused
        parameter, per-expert projections into the experts' w13 / w2 parameter."""
        head = vname[: len(vname) - len(proj) - 1]
        hit = expert_of(vname)
        if hit is not None and hit[2] in self.experts:
            prefix, eid, _ = hit
            fused, sid = self.experts[hit[2]]
            return f"{prefix}.{fused}{suffix}", f"{eid}:{sid}"
        if proj in self.stacked:
            fused, sid = self.stacked[proj]
            return f"{head}.{fused}.{suffix}", sid
        return f"{vname}.{suffix}", ""

    # ---- one module ----------------------------------------------------------------------------------------------
    def module(self, name: str, module: Module) -> None:
        vname = self.vllm_name(name + ".")
        if vname is None:
            for suffix in module.tensors:
                self.fates.append(
                    TensorFate(f"{name}.{suffix}", "skipped", reason="the model class's hf_to_vllm_mapper drops it")
                )
            return
        vname = vname[:-1]
        built = self.built(name, module)
        belongs = self.family.belongs_at(name)
        # Misnested, and vLLM's mappers do not bring it back where it belongs.
        if belongs is not None and self.vllm_name(belongs + ".") != vname + ".":
            self.misnested_module(name, vname, belongs, module, built)
            return
        owner = self.owner(name) if built is not None else None
        proj = name.rpartition(".")[2]
        if built is not None:
            self.register(name, vname, proj, module, built, owner)
        for suffix, info in module.tensors.items():
            tensor = f"{name}.{suffix}"
            if self.skip.search(tensor):
                self.fates.append(TensorFate(tensor, "skipped", reason="the loader skips this name on purpose"))
            elif is_kv_scale_name(tensor) and (kv := self.kv_scale(tensor, vname, suffix)) is not None:
                self.fates.append(kv)
            elif built is None:
                self.fates.append(TensorFate(tensor, "loaded", f"{vname}.{suffix}"))
            else:
                fate = self.judged(tensor, vname, proj, suffix, info.dtype, info.shape, built)
                # An unrenamed KV-scale name that raises is kv-scale-naming's (CK203), which says how to rename it.
                rule = owner or (KV_SCALE_NAMING if is_kv_scale_name(tensor) else None)
                self.fates.append(replace(fate, owner=rule) if rule and fate.problem else fate)

    def misnested_module(self, name: str, vname: str, belongs: str, module: Module, built: _Built | None) -> None:
        """A module nested under another component's root (misnested-prefix, CK201, reports it and its fix). vLLM
        has no module at its name: the inner model's loader raises on every one of its tensors, naming the first
        segment it lacks (`visual`). The layer vLLM does build for it, where it belongs (`visual.blocks.0.attn.qkv`
        for `model.language_model.visual.blocks.0.attn.qkv`, built as the config declares that name), gets none of
        them: its parameters stay unfilled (filled only where the checkpoint also holds the module at its place)."""
        lacking = self.relative(vname).split(".", 1)[0]
        for suffix in module.tensors:
            tensor = f"{name}.{suffix}"
            if self.skip.search(tensor):
                self.fates.append(TensorFate(tensor, "skipped", reason="the loader skips this name on purpose"))
                continue
            self.fates.append(
                TensorFate(
                    tensor,
                    "fatal",
                    error=f"ValueError: There is no module or parameter named '{lacking}' in {self.mc.inner_class}",
                    reason=f"it belongs at `{belongs}.{suffix}`",
                    problem="no-parameter",
                    owner=MISNESTED_PREFIX,
                )
            )
        target = self.vllm_name(belongs + ".")
        if target is None:  # where it belongs, the mapper drops it: nothing is built for it
            return
        layer = built or _UNMODELLED
        proj = belongs.rpartition(".")[2]
        suffixes: set[str] | frozenset[str]
        if built is None:  # a module the model does not describe: a parameter per tensor, of the same name
            suffixes = {s for s in module.tensors if not self.skip.search(f"{name}.{s}")}
        else:
            suffixes = built.must_fill | built.unused | (module.suffixes & set(built.params))
        for suffix in sorted(suffixes):
            pname, sid = self.param_of(target[:-1], proj, suffix)
            param = self.param(pname, layer, suffix, MISNESTED_PREFIX)
            param.unused = param.unused or suffix in layer.unused
            param.expected.add(sid)
            param.sources.setdefault(sid, f"{name}.{suffix}")

    def register(self, name: str, vname: str, proj: str, module: Module, built: _Built, owner: str | None) -> None:
        """The parameters this module's layer registers, each with the shards it expects and the checkpoint tensor
        that should fill each shard."""
        missing_owner = owner or self.missing_owner(name, module, built)
        parent = name.rpartition(".")[0]
        for suffix in sorted(built.must_fill | built.unused):  # sorted: the report lists them in a stable order
            pname, sid = self.param_of(vname, proj, suffix)
            param = self.param(pname, built, suffix, owner)
            param.unused = param.unused or suffix in built.unused
            param.missing_owner = param.missing_owner or missing_owner
            # A stacked parameter expects every sibling shard, in a block the checkpoint shows more of (a lone
            # projection under a block no other module is in says nothing about the block vLLM builds).
            if proj in self.stacked and ":" not in sid and self.block_shown(parent, proj):
                fused = self.stacked[proj][0]
                for sibling, sibling_sid in self.siblings[fused]:
                    param.expected.add(sibling_sid)
                    param.sources[sibling_sid] = f"{parent}.{sibling}.{suffix}"
            else:
                param.expected.add(sid)
                param.sources[sid] = f"{name}.{suffix}"

    def misnested_modules(self, modules: Mapping[str, Module]) -> list[str]:
        """The modules nested under a root their component does not belong to (`Family.belongs_at`). Asked once per
        experts prefix for its experts: where a name belongs is decided by the segments below its root, which an
        experts prefix already holds."""
        moved_banks = {p for p in {m.expert[0] for m in modules.values() if m.expert} if self.family.belongs_at(p)}
        belongs_at = self.family.belongs_at
        return [
            name
            for name, module in modules.items()
            if (module.expert[0] in moved_banks if module.expert else belongs_at(name))
        ]

    def block_shown(self, parent: str, proj: str) -> bool:
        """Whether the checkpoint holds another projection of this block (a stacked sibling or a row-parallel one)."""
        modules = self.ckpt.modules
        others = (*self.stacked, *self.mc.row_parallel)
        return any(p != proj and f"{parent}.{p}" in modules for p in others)

    def param(self, pname: str, built: _Built, suffix: str, owner: str | None = None) -> _Param:
        param = self.params.get(pname)
        if param is None:
            param = self.params[pname] = _Param(pname, built.params.get(suffix), note=_note(built.what), owner=owner)
        return param

    def missing_owner(self, name: str, module: Module, built: _Built) -> str | None:
        """The catalogue rule that reports this module's missing tensors: where vLLM builds the very scale table the
        tensors follow (rules/scales.toml), scale-shape-mismatch (CK403) or, for GPTQ / AWQ packing,
        packed-layout-mismatch (CK404) names what is missing from it. Where vLLM builds another table than the
        tensors follow (block-FP8 `weight_scale_inv` beside a `weight_scale`), the load model reports."""
        row, weight = self.rows.get(name), module.weight
        if built.scheme is None or row is None or weight is None:
            return None
        kind = row.declared.kind if row.declared.quantized else row.disk.kind
        if scheme_for(kind, module.suffixes, weight.dtype, self.det.producer) is not built.scheme:
            return None
        return _catalogue_rule(built.scheme)

    def judged(
        self,
        tensor: str,
        vname: str,
        proj: str,
        suffix: str,
        dtype: str,
        shape: tuple[int, ...],
        built: _Built,
        record: bool = True,
    ) -> TensorFate:
        """The fate of one tensor of a built module; `record` marks the parameter shard it fills."""
        if suffix not in built.params:
            if any(tensor.endswith(t) for t in self.mc.tolerated_suffixes):
                return TensorFate(
                    tensor, "skipped", reason=f"{self.mc.inner_class}.load_weights drops it: no parameter has the name"
                )
            rel = self.relative(f"{vname}.{suffix}")
            have = ", ".join(f"`{p}`" for p in sorted(built.params)) or "none"
            # A stacked shard's name is renamed onto the fused module first; vLLM's error then depends on the
            # module class (docs/reference/load-model.md), so only the unstacked error is quoted.
            error = (
                None
                if proj in self.stacked
                else f"ValueError: There is no module or parameter named '{rel}' in {self.mc.inner_class}"
            )
            return TensorFate(
                tensor,
                "fatal",
                error=error,
                reason=f"vLLM builds {built.what} with parameters {have}",
                problem="no-parameter",
            )
        pname, sid = self.param_of(vname, proj, suffix)
        if record:
            self.param(pname, built, suffix).filled.add(sid)
        spec = built.params[suffix]
        cast = _cast(dtype, spec)
        if cast:
            # A scale's dtype is judged against the same table by CK403 / CK404; a weight's cast is this model's.
            return TensorFate(
                tensor,
                "loaded",
                pname,
                sid or None,
                reason=f"{cast} (`{suffix}` of {built.what})",
                problem="dtype-cast",
                owner=None
                if spec is None or spec.role == "weight" or built.scheme is None
                else _catalogue_rule(built.scheme),
            )
        misfit = self.misfit(tensor, proj, dtype, shape, spec, built)
        if misfit is not None:
            error, reason, transposed = misfit
            # packed-layout-mismatch (CK404) judges transposed weights, and GPTQ / AWQ packing against the config.
            layout_rule = transposed or (
                built.scheme is not None and _catalogue_rule(built.scheme) == PACKED_LAYOUT_MISMATCH
            )
            return TensorFate(
                tensor,
                "fatal" if error else "loaded",
                pname,
                sid or None,
                reason=reason,
                error=error,
                problem="shape",
                owner=PACKED_LAYOUT_MISMATCH if layout_rule else None,
            )
        return TensorFate(tensor, "loaded", pname, sid or None)

    def misfit(
        self, tensor: str, proj: str, dtype: str, shape: tuple[int, ...], spec: TensorSpec | None, built: _Built
    ) -> tuple[str | None, str, bool] | None:
        """(vLLM's error or None when it narrows silently, why, whether the tensor is stored transposed) for a
        packed weight whose input dimension does not match the config's packing; None when it fits or cannot be
        judged from the header."""
        if spec is None or spec.role != "weight" or len(shape) != 2:
            return None
        features = _features(self.ckpt, tensor.rpartition(".")[0])
        if features is None:
            return None
        _, k = features
        bits = built.bits or 4
        want = {
            "int-packed": (1, -(-k * bits // 32)),
            "packed4": (1, k // 2),
            "full": (1, k),
            "gptq-qweight": (0, k * bits // 32),
            "awq-qweight": (0, k),
        }.get(spec.shape)
        if want is None or shape[want[0]] == want[1]:
            return None
        axis, cols = want
        # An F4 header counts FP4 values, two to the byte the parameter holds.
        got = shape[axis] // 2 if dtype == "F4" and axis == len(shape) - 1 else shape[axis]
        transposed = shape[1 - axis] == cols
        why = (
            f"The config builds {built.what}, whose `{spec.suffix}` holds {cols} along the input for in_features {k}; "
            f"the tensor holds {got}"
        )
        if proj in self.mc.row_parallel and axis == 1:
            if got < cols:
                return f"RuntimeError: start (0) + length ({cols}) exceeds dimension size ({got}).", why, transposed
            return None, why + f": vLLM narrows it to the first {cols} silently", transposed
        return "AssertionError", why, transposed

    def kv_scale(self, tensor: str, vname: str, suffix: str) -> TensorFate | None:
        """A KV-cache scale's fate; None when the runtime's release neither renames it nor drops it, so the load
        looks it up as it is and raises (judged like any other tensor)."""
        spelling = classify(tensor)
        renamed = self.kv_release.spellings
        if (
            spelling is not None
            and spelling.id in renamed
            and (
                spelling.status in ("loaded", "deprecated")
                or (spelling.status == "method-only" and self.det.vllm_quantization in spelling.methods)
            )
        ):
            # `self_attn.k_scale` hangs off the attention block; `self_attn.k_proj.k_scale` off a projection of it.
            block = vname.rpartition(".")[0] if vname.endswith("_proj") else vname
            which = (
                "k" if suffix == "kv_scale" else suffix[0] if suffix != "output_scale" else vname.rpartition(".")[2][0]
            )
            return TensorFate(tensor, "loaded", f"{block}.attn.{which}_scale")
        if spelling is not None and spelling.status == "method-only":
            if not self.kv_release.drops(self.mc.id):
                return None
            return TensorFate(
                tensor,
                "skipped",
                reason=f"{self.mc.inner_class}.load_weights drops it (no parameter has the name); the attention's "
                "scale keeps its default 1.0",
            )
        return TensorFate(tensor, "skipped", reason="vLLM ignores a KV-cache scale name its mapper does not know")

    # ---- what vLLM builds ----------------------------------------------------------------------------------------
    def built(self, name: str, module: Module) -> _Built | None:
        if name.endswith(".embed_tokens"):
            return self.embedding(name)
        row = self.rows.get(name)
        if row is None:
            return None
        weight = module.weight
        # By identity: the schemes are alive with the rows, and a hostile config's detail may be unhashable.
        key = (id(row.declared), id(row.disk), row.group, weight.dtype if weight is not None else None)
        if key not in self._built:
            self._built[key] = self.linear(row, module)
        return self._built[key]

    def owner(self, name: str) -> str | None:
        """The catalogue rule that reports this module's defect already, if any: misnested-prefix (CK201) for a
        module under another component's root; quant-config-mismatch (CK304) for
        tensors of another scheme; orphan-scale (CK302) for extra tensors on a float layer built unquantized; ignore-list-mismatch (CK301) for a layer built against its storage, or a fused
        layer whose shards the config splits, under the producers it judges."""
        if self.family.belongs_at(name) is not None:
            return MISNESTED_PREFIX
        row = self.rows.get(name)
        if row is not None and _other_scheme(row):
            return QUANT_CONFIG_MISMATCH
        if row is not None and not row.declared.quantized and row.disk.kind == "unquantized":
            # Extra tensors beside a float weight on a layer built unquantized are orphan-scale's (CK302).
            return ORPHAN_SCALE
        if self.det.producer not in _IGNORE_LIST_PRODUCERS:
            return None
        parent, _, proj = name.rpartition(".")
        fused = self.stacked.get(proj, (None,))[0]
        names = [f"{parent}.{p}" for p, (f, _) in self.stacked.items() if f == fused] if fused else [name]
        rows = [r for r in map(self.rows.get, names) if r is not None]
        if any(_against_storage(r) for r in rows) or len({r.declared.quantized for r in rows}) > 1:
            return IGNORE_LIST_MISMATCH
        return None

    def linear(self, row: ModuleRow, module: Module) -> _Built | None:
        lo = loader()
        if not row.declared.quantized:
            if row.declared.kind == "unknown":
                return None
        elif row.disk.kind == "unquantized" and not self.has_exclusions:
            return None
        if not row.declared.quantized:
            params: dict[str, TensorSpec | None] = dict.fromkeys(lo.unquantized | lo.unquantized_optional)
            return _Built(params, frozenset(lo.unquantized), frozenset(), "an unquantized linear")
        method = self.method(row.declared.kind)
        if method is None:
            return None
        scheme = self.scheme(method, module)
        if scheme is None:
            return None
        a16 = row.declared.activation == "A16"
        params = {t.suffix: t for t in scheme.tensors}
        must = {
            t.suffix for t in scheme.tensors if t.required or (t.activation and t.activation == row.declared.activation)
        }
        unused = set(method.weight_only_unused) if a16 else set()
        if not a16:
            must |= {s for s in method.weight_only_unused if s in params}
        for s in method.weight_only_unused:
            params.setdefault(s, None)
        return _Built(
            params,
            frozenset(must - unused),
            frozenset(unused),
            f"a {row.declared.label} layer",
            scheme,
            _INT_BITS.get(row.declared.kind),
        )

    def method(self, kind: str) -> Method | None:
        cfg = self.det.config
        for m in methods_for(self.det.vllm_quantization, kind):
            if m.when is None:
                return m
            key = m.when.lstrip("!")
            present = cfg.get(key) is not None
            if present != m.when.startswith("!"):
                return m
        return None

    def scheme(self, method: Method, module: Module) -> ScaleScheme | None:
        candidates = [self._scheme_by_id[s] for s in method.schemes if s in self._scheme_by_id]
        tensors = module.tensors
        same = [
            s for s in candidates if s.weight.suffix in tensors and tensors[s.weight.suffix].dtype in s.weight.dtypes
        ]
        chosen = same or [s for s in candidates if s.weight.suffix in tensors] or candidates
        return chosen[0] if chosen else None

    def embedding(self, name: str) -> _Built | None:
        emb = self.mc.embedding
        if emb is None or self.det.vllm_quantization not in (None, "compressed-tensors"):
            return None
        lo = loader()
        cfg = self.det.config.data or {}
        inner = self.mc.inner_class

        def unquantized(why: str = "") -> _Built:
            what = f"an unquantized embedding{f' ({why})' if why else ''}"
            return _Built(dict.fromkeys(lo.unquantized), frozenset(lo.unquantized), frozenset(), what)

        if self.det.vllm_quantization is None:
            return unquantized()
        if not emb.quant_config:
            targeted = _embedding_group(cfg, EMBEDDING_TARGETS, name) is not None
            return unquantized(f"{inner} builds `embed_tokens` without the quant config" if targeted else "")
        group = _embedding_group(cfg, emb.targets, name)
        if group is None:
            if _embedding_group(cfg, EMBEDDING_TARGETS, name) is None:
                return unquantized()
            hows: dict[tuple[str, ...], str] = {
                ("class",): "by class name only (a target such as `Embedding`); a name or `re:` target leaves it "
                "unquantized",
                ("name",): "by name or `re:` target only; a class target leaves it unquantized",
            }
            how = hows.get(emb.targets, "with no compressed-tensors target")
            return unquantized(f"{inner} quantizes `embed_tokens` {how}")
        raw = group.get("weights")
        weights: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
        if not _is_wna16(group, weights):
            self.build_errors.append(
                f"`{name}`: compressed-tensors embeddings only support weight-only INT group/channel (WNA16) "
                f"quantization, and config group targets {list(group.get('targets') or [])} quantize it otherwise"
            )
            return None
        bits = weights.get("num_bits")
        scheme = self._scheme_by_id.get(
            "compressed-tensors-int8-packed" if bits == 8 else "compressed-tensors-int-packed"
        )
        if scheme is None:
            return None
        params = {t.suffix: t for t in scheme.tensors}
        must = frozenset(t.suffix for t in scheme.tensors if t.required)
        return _Built(params, must, frozenset(), "a quantized (WNA16) embedding", scheme, bits if bits in (4, 8) else 4)

    # ---- parameters ----------------------------------------------------------------------------------------------
    def fills(self) -> tuple[ParameterFill, ...]:
        out = []
        for p in self.params.values():
            # A tensor the index places in a missing or unreadable shard counts as present: that shard's own finding
            # is the cause.
            missing = tuple(sorted(sid for sid in p.expected - p.filled if p.sources.get(sid) not in self.unavailable))
            filled = not missing
            # Expert shards are always parts of one fused parameter of every expert: list them even when none of
            # them is filled.
            partial = missing if missing and missing != ("",) and (p.filled or ":" in missing[0]) else ()
            spec = p.spec
            out.append(
                ParameterFill(
                    parameter=p.name,
                    shape=None,
                    dtype=spec.dtypes[0] if spec else None,
                    filled=filled,
                    partial=partial,
                    default="unused" if p.unused and not p.filled else None,
                    note="" if filled else p.note,
                    owner=p.owner or (None if filled else self.unfilled_owner(p, missing)),
                )
            )
        return tuple(out)

    def unfilled_owner(self, p: _Param, missing: tuple[str, ...]) -> str | None:
        """The catalogue rule that reports these missing tensors: moe-expert-missing-scale (CK402) for experts,
        nvfp4-weight-only (CK401) for NVFP4 input scales, else the module's (`missing_owner`)."""
        if any(":" in sid for sid in missing):
            return MOE_EXPERT_MISSING_SCALE
        if p.name.rpartition(".")[2].removeprefix("w13_").removeprefix("w2_") in global_scales().input:
            return NVFP4_WEIGHT_ONLY
        # The catalogue judges the tensors of modules that exist; a stacked sibling absent altogether is ours.
        modules = self.ckpt.modules
        if all(p.sources.get(sid, "").rpartition(".")[0] in modules for sid in missing):
            return p.missing_owner
        return None


def _catalogue_rule(scheme: ScaleScheme) -> str:
    """The catalogue rule that judges a quantized layer's tensors against its scale table: packed-layout-mismatch
    (CK404) for GPTQ / AWQ packing, scale-shape-mismatch (CK403) for every other table."""
    return PACKED_LAYOUT_MISMATCH if scheme.producer in ("gptq", "awq") else SCALE_SHAPE_MISMATCH


def _against_storage(row: ModuleRow) -> bool:
    """A layer built quantized over unquantized tensors, or the other way round."""
    return row.declared.quantized != row.disk.quantized and "unknown" not in (row.declared.kind, row.disk.kind)


def _other_scheme(row: ModuleRow) -> bool:
    """Tensors of another quantized scheme than the declared one, as quant-config-mismatch (CK304) reports them:
    int4 and int8 excepted (4-bit values stored in 8-bit containers are one scheme to it)."""
    kinds = {row.declared.kind, row.disk.kind}
    return row.declared.quantized and row.disk.quantized and len(kinds) == 2 and not kinds <= {"int4", "int8"}


def _note(what: str) -> str:
    return f"{what} computes with these parameters left as `torch.empty` memory (garbage)"


def _kind(dtype: str) -> str:
    # F4 is packed FP4 bytes (safetensors reads it as float4_e2m1fn_x2, two values a byte), as a U8 packed
    # parameter holds them.
    return "int" if dtype[0] in "IU" or dtype in ("BOOL", "F4") else "float"


def _cast(dtype: str, spec: TensorSpec | None) -> str | None:
    """`F32 into a U8 parameter` when vLLM would copy a float tensor into an integer parameter (or back)."""
    if spec is None:
        return None if _kind(dtype) == "float" else f"{dtype} into a floating-point parameter"
    if dtype in spec.dtypes or _kind(dtype) == _kind(spec.dtypes[0]):
        return None
    return f"{dtype} into a {spec.dtypes[0]} parameter"


def _features(ckpt: Checkpoint, module: str) -> tuple[int, int] | None:
    return config_features(ckpt, module)


def _is_wna16(group: Mapping[str, Any], weights: Mapping[str, Any]) -> bool:
    """The only embedding quantization vLLM's compressed-tensors config builds: weight-only INT, group or channel
    (vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py, vLLM 0.33.0)."""
    return (
        weights.get("type") == "int"
        and weights.get("strategy") in ("group", "channel")
        and group.get("input_activations") is None
    )


def _names(entry: object, name: str) -> bool:
    """A compressed-tensors ignore / target entry naming `name`: exactly, or by `re:` regex with `re.match` (an
    entry that is no valid regex names nothing)."""
    import re

    if not isinstance(entry, str):
        return False
    if not entry.startswith("re:"):
        return entry == name
    try:
        return re.match(entry[3:], name) is not None
    except re.error:
        return False


def _embedding_group(cfg: Mapping[str, Any], kinds: tuple[str, ...], name: str) -> Mapping[str, Any] | None:
    """The compressed-tensors config group that quantizes the embedding, as vLLM matches it: a class-name target
    by case-insensitive substring of `VocabParallelEmbedding`, a name target (exact or `re:`) against the layer
    name, each only where the model class lets that kind match (rules/loader.toml `embedding.targets`)."""
    groups = cfg.get("config_groups")
    if not isinstance(groups, dict):
        return None
    ignore = cfg.get("ignore")
    if any(_names(entry, name) for entry in (ignore if isinstance(ignore, list) else [])):
        return None
    for group in groups.values():
        targets = group.get("targets") if isinstance(group, dict) else None
        for target in targets if isinstance(targets, list) else []:
            if not isinstance(target, str):
                continue
            if target.startswith("re:") or "." in target:
                hit = "name" in kinds and _names(target, name)
            else:
                hit = "class" in kinds and target.lower() in "vocabparallelembedding"
            if hit:
                return group
    return None
