from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from ..knowledge.architectures import is_explicit, markers
from ..knowledge.layouts import ForeignLayout, foreign_layouts
from ..model.checkpoint import Checkpoint
from ._experts import first_tensor, non_expert_modules
from ._memo import once_per
from .base import Context, Finding, Rule, files_of, register


def _head(name: str, depth: int = 2) -> str:
    return ".".join(name.split(".")[:depth]) + ".*"


Verdict = tuple[str, str, ForeignLayout | None] | None  # ("unrooted" | "homeless", group key, layout) or None


class _Placement:
    """Where each tensor name stands against the architecture family's roots. The verdict depends on a name's first
    four segments and on the foreign prefixes it starts with, so it is decided once per prefix that holds both: per
    module, and per MoE experts prefix (all its experts share it)."""

    def __init__(self, ctx: Context) -> None:
        self.family = ctx.det.family
        self.explicit = is_explicit(self.family.id, ctx.ckpt.architecture, ctx.ckpt.model_type)
        self.own = {r.component for r in self.family.roots}
        self.comp_of_marker = {seg: comp for comp, segs in markers().items() for seg in segs}
        arch = ctx.ckpt.architecture or ""
        self.applicable = [
            layout
            for layout in foreign_layouts()
            if not layout.architecture_suffix or arch.endswith(layout.architecture_suffix)
        ]
        self.longest = max((len(p) for layout in self.applicable for p in layout.prefixes), default=0)
        self.by_module: dict[str, Verdict] = {}
        self.by_layer: dict[str, Verdict] = {}

    def classify(self, name: str) -> Verdict:
        hit = self.family.root_of(name)
        if hit is None:
            layout = next((lay for lay in self.applicable if name.startswith(lay.prefixes)), None)
            if layout is None and not self.explicit:
                return None
            return "unrooted", _head(name), layout
        root, prefix = hit
        first = name[len(prefix) :].split(".", 1)[0]
        comp = self.comp_of_marker.get(first)
        if self.explicit and comp is not None and comp not in self.own and root.children is not None:
            return "homeless", f"{prefix}{first}.*", None
        return None

    def decides(self, prefix: str) -> bool:
        return prefix.count(".") >= 3 and len(prefix) >= self.longest

    def _layer_verdict(self, layer: str, name: str) -> Verdict:
        if layer not in self.by_layer:
            self.by_layer[layer] = self.classify(name)
        return self.by_layer[layer]

    def flagged(self, module: str, held) -> bool:
        """Whether any tensor of `module` gets a verdict (filling the caches `verdict` reads)."""
        where = held.expert
        if where is not None and self.decides(where[0]):
            self.by_module[module] = self._layer_verdict(where[0], next(iter(held.tensors.values())).name)
            return self.by_module[module] is not None
        if self.decides(module):
            self.by_module[module] = self.classify(next(iter(held.tensors.values())).name)
            return self.by_module[module] is not None
        return any(self.classify(t.name) is not None for t in held.tensors.values())

    def verdict(self, name: str, held) -> Verdict:
        module = name.rpartition(".")[0]
        try:
            return self.by_module[module]
        except KeyError:
            pass
        where = held.expert if held is not None else None
        if where is not None and self.decides(where[0]):
            verdict = self._layer_verdict(where[0], name)
        else:
            verdict = self.classify(name)
        if self.decides(module):
            self.by_module[module] = verdict
        return verdict


def _any_flagged(place: _Placement, ckpt: Checkpoint) -> bool:
    """Whether any tensor gets a verdict. WHY per layer: below an experts prefix that `decides`, every name shares
    the prefix's verdict (`_Placement`), so one tensor of the layer stands for all of its experts."""
    modules = ckpt.modules
    for layer, group in ckpt.experts.items():
        if place.decides(layer):
            if place._layer_verdict(layer, first_tensor(group)) is not None:
                return True
        elif any(place.flagged(m.name, m) for projs in group.experts.values() for m in projs.values()):
            return True
    return any(place.flagged(name, modules[name]) for name in non_expert_modules(ckpt))


@once_per
def _misplaced(ctx: Context) -> tuple[dict[str, list[str]], dict[str, ForeignLayout], dict[str, list[str]]]:
    """(names under no root, grouped by head; the foreign layout per head; names of components the architecture
    lacks, grouped by prefix)."""
    unrooted: dict[str, list[str]] = defaultdict(list)
    layouts: dict[str, ForeignLayout] = {}
    homeless: dict[str, list[str]] = defaultdict(list)
    place = _Placement(ctx)
    modules = ctx.ckpt.modules
    # A healthy checkpoint has nothing to report: one verdict per experts prefix and one per other module show it.
    # Only when something is found are the names gathered, in tensor order.
    if not _any_flagged(place, ctx.ckpt):
        return unrooted, layouts, homeless
    for name in ctx.ckpt.tensors:
        verdict = place.verdict(name, modules.get(name.rpartition(".")[0]))
        if verdict is None:
            continue
        kind, key, layout = verdict
        if kind == "unrooted":
            unrooted[key].append(name)
            if layout is not None:
                layouts[key] = layout
        else:
            homeless[key].append(name)
    return unrooted, layouts, homeless


def misplaced_names(ctx: Context) -> set[str]:
    """Tensor names this rule reports: other rules leave them alone, since their names are what is wrong."""
    unrooted, _layouts, homeless = _misplaced(ctx)
    return {n for group in (unrooted, homeless) for names in group.values() for n in names}


@register
class NonHfLayout(Rule):
    """Tensor names in a layout the declared architecture does not load (non-Hugging-Face or another class's).

    What it catches
    (docs/reference/failures.md #5)
    - tensors under none of the prefixes the architecture family loads from (rules/architectures.toml), for
      architectures whose layout is known: e.g. bare `model.layers.*` in a Qwen3.5 / Qwen3-VL ConditionalGeneration
      checkpoint, which vLLM does not remap (vllm/model_executor/models/qwen3_5.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §5.1));
    - for any architecture, trainer namespaces listed in rules/layouts.toml: Megatron / NeMo / verl `decoder.*`,
      `embedding.word_embeddings.*`, `output_layer.*`, and a multimodal `language_model.*` root under a text-only
      `...ForCausalLM` class;
    - (warning) components the architecture has no place for, e.g. `model.visual.*` vision-tower tensors in a
      checkpoint declared as the text-only `Qwen3_5MoeForCausalLM`.
    Mis-nested components that do have a canonical place are misnested-prefix (CK201).

    Why it matters
    vLLM maps checkpoint names through the class's `hf_to_vllm_mapper` and fails on the first name with no module:
    `ValueError: There is no module or parameter named 'language_model' in Gemma3ForCausalLM` (vllm-project/vllm#15031),
    after the whole download; older loaders skipped unknown names with a warning and served random weights.

    Anti-pattern
    Quantizing a checkpoint straight out of a trainer (Megatron, verl FSDP/mcore) without its Hugging Face export;
    serving a VLM checkpoint with a text-only `architectures` entry.

    Fix
    Convert to Hugging Face names with the trainer's exporter, or set `architectures` to the class the checkpoint
    was saved from; for a prefix that is merely one level off, `ckpt fix-prefix TARGET --from OLD --to NEW` renames
    headers and the index in place.
    """

    code = "CK202"
    slug = "non-hf-layout"
    severity = "error"
    title = "Tensor names in a layout the architecture does not load"

    def check(self, ctx: Context) -> Iterable[Finding]:
        family = ctx.det.family
        arch = ctx.ckpt.architecture or ctx.ckpt.model_type or "this architecture"
        unrooted, layouts, homeless = _misplaced(ctx)
        if unrooted:
            names = sorted(n for ns in unrooted.values() for n in ns)
            groups = sorted(unrooted, key=lambda k: -len(unrooted[k]))
            shown = ", ".join(f"`{g}` ({len(unrooted[g])})" for g in groups[:4])
            layout = next((layouts[g] for g in groups if g in layouts), None)
            expected = ", ".join(f"`{p}`" for r in family.roots for p in r.prefixes)
            message = (
                f"{len(names)} tensor(s) sit under prefixes {arch} does not load from: {shown}. vLLM fails "
                f"with \"There is no module or parameter named ...\" (expected roots: {expected})."
            )
            if layout is not None:
                message += f" These are {layout.name}: {layout.fix}."
            yield self.finding(
                message,
                tensors=names,
                files=files_of(ctx.ckpt, names),
                details={
                    "prefixes": {g: len(unrooted[g]) for g in groups},
                    "layout": layout.id if layout else None,
                    "family": family.id,
                },
            )
        if homeless:
            names = sorted(n for ns in homeless.values() for n in ns)
            shown = ", ".join(f"`{g}` ({len(v)})" for g, v in sorted(homeless.items()))
            yield self.finding(
                f"{len(names)} tensor(s) belong to a component {arch} does not have ({shown}): the text-only class "
                f"drops them or fails on them. Serve with the multimodal class the checkpoint was saved from, or "
                f"remove them for a text-only export.",
                tensors=names,
                files=files_of(ctx.ckpt, names),
                severity="warning",
                details={"prefixes": {g: len(v) for g, v in homeless.items()}, "family": family.id},
            )
