from __future__ import annotations

import fnmatch
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from itertools import chain
from operator import itemgetter
from types import MappingProxyType

from ..detect.matching import RegexBudget
from ..detect.resolve import ModuleRow, RowClass
from ..knowledge.modules import fused_groups_for
from .base import Context, Finding, Rule, module_files, register
from .ck201_misnested_prefix import rename_plan
from .ck202_non_hf_layout import misplaced_names


def _hf_side_entry(ctx: Context, name: str, budget: RegexBudget) -> str | None:
    """An ignore entry that covers the *checkpoint* name with the producer's own matcher, although vLLM's matcher
    (on vLLM-side names) does not: the naming trap of vllm/model_executor/layers/quantization/utils/config_utils.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.5)."""
    det = ctx.det
    entries = det.config.get("ignore") or det.config.get("exclude_modules") or []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, str) or not entry:
            continue
        if det.producer == "compressed-tensors":
            if entry.startswith("re:"):
                if budget.match(entry[3:], name):
                    return entry
            elif entry == name:
                return entry
        elif entry == name or entry in name or fnmatch.fnmatchcase(name, entry):
            return entry
    return None


def _weight_suffix(ctx: Context, module: str) -> str:
    weight = ctx.ckpt.modules[module].weight
    return weight.name.rsplit(".", 1)[-1] if weight is not None else "weight"


_Part = tuple[RowClass, Sequence[str]]  # a row class and the members of it that are judged


def _rows(parts: list[_Part]) -> list[ModuleRow]:
    """The rows of these members, in row (name) order."""
    rows = list(chain.from_iterable(c.rows(names) for c, names in parts))
    rows.sort(key=itemgetter(0))
    return rows


def _shown(names: list[str], n: int = 3) -> str:
    return ", ".join(f"`{x}`" for x in names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


@register
class IgnoreListMismatch(Rule):
    """The ignore / exclude list disagrees with which modules are actually quantized on disk.

    What it catches
    Evaluated with vLLM's own matching (vllm/model_executor/layers/quantization/utils/config_utils.py, vLLM 0.33.0 (docs/reference/vllm-0.33.md §2.5) for compressed-tensors `ignore`, 3.3 for ModelOpt
    `exclude_modules`), on vLLM-side module names:
    - modules the config leaves unquantized (an ignore / exclude entry covers them, no config group targets them,
      or the model builds them unquantized) whose tensors are quantized on disk;
    - modules the config quantizes whose weights are BF16/F16 on disk, with the entry that was meant to cover them
      when one matches the checkpoint name but not vLLM's name. The classic case is a regex written against
      checkpoint names: `re:model\\.visual.*` never matches the Qwen3-VL / Qwen3.5 tower, which vLLM names
      `visual.*`, so the tower is built quantized (docs/reference/failures.md #6);
    - fused layers (q/k/v, gate/up, Qwen3.5 in_proj_qkv/z) whose shards the config treats differently.

    Why it matters
    vLLM builds each layer's parameters from the config, then copies checkpoint tensors into them. BF16 weights
    loaded into FP4-packed parameters fail with `size of tensor a (256) must match ... (512)` or load garbage;
    quantized tensors on a layer built unquantized fail with "There is no module or parameter named
    ...weight_packed"; fused layers with mixed shards raise "Found different quantization schemes for the shards"
    / "Detected some but not all shards of ... are quantized".

    Anti-pattern
    Writing the ignore list in checkpoint naming for a model whose vLLM class renames prefixes, excluding only
    some of q/k/v, or quantizing with one ignore list and publishing a config with another.

    Fix
    Make the list cover exactly the modules stored unquantized, in vLLM's naming: regexes against vLLM names
    (`re:.*visual.*`), plain entries as full checkpoint module names, all shards of a fused layer together.
    """

    code = "CK301"
    slug = "ignore-list-mismatch"
    severity = "error"
    title = "Ignore / exclude list does not match the quantized modules"

    def check(self, ctx: Context) -> Iterable[Finding]:
        det = ctx.det
        if det.producer not in ("modelopt", "compressed-tensors") or det.rejection or det.config.data is None:
            return
        # Judged per row class (Detection.classes), each with the members that are kept: the verdicts read the
        # row's schemes and covered_by, which a class shares; the members are expanded to rows only where there is
        # something to report.
        # Modules under a wrong prefix are misnested-prefix's / non-hf-layout's: once renamed, the list may match.
        wrong = {n for names in rename_plan(ctx).values() for n in names} | misplaced_names(ctx)
        parts: list[_Part] = []
        for c in det.classes:
            if wrong:
                # The weight's suffix is the layout's, so the class's.
                suffix = _weight_suffix(ctx, c.names[0])
                kept = [n for n in c.names if f"{n}.{suffix}" not in wrong]
                if kept:
                    parts.append((c, kept))
            else:
                parts.append((c, c.names))
        # Nothing declared quantized and nothing quantized on disk: quant-config-mismatch's business, not ours.
        if not any(c.declared.quantized for c, _ in parts) or not any(c.disk.quantized for c, _ in parts):
            return
        # Name the key the config actually uses (ModelOpt writes `ignore` in config.json, `exclude_modules` in
        # hf_quant_config.json); the detector reads `ignore` first.
        key = "ignore" if det.producer == "compressed-tensors" or det.config.get("ignore") else "exclude_modules"
        source = det.config.source or "config.json"
        # Modules under the family's dropped prefixes (Qwen3.5 `mtp.`) are loaded only by the MTP drafter: a
        # mismatch there breaks speculative decoding, not the model, so it is reported apart as a warning.
        dropped = ctx.det.family.dropped_prefixes
        main: list[_Part] = parts
        drafter: list[_Part] = []
        if dropped:
            main, drafter = _split_drafter(parts, dropped)
        for part, scope in ((main, None), (drafter, "drafter")):
            for finding in (
                *self._unquantized_but_quantized(ctx, part, key, source),
                *self._quantized_but_unquantized(ctx, part, key, source),
            ):
                if scope is None:
                    yield finding
                else:
                    yield replace(
                        finding,
                        severity="warning",
                        message=(
                            f"{finding.message} These modules are loaded only by the MTP drafter "
                            f"(`--speculative-config '{{\"method\": \"mtp\"}}'`); the main model is unaffected."
                        ),
                        details=MappingProxyType({**finding.details, "scope": "mtp-drafter"}),
                    )
        # Only linears are fused (experts are skipped below): their rows suffice.
        yield from self._fused_disagree(ctx, _rows([p for p in parts if not p[0].is_expert]), source)

    def _unquantized_but_quantized(self, ctx: Context, parts: list[_Part], key: str, source: str) -> Iterable[Finding]:
        bad = _rows(
            [
                p
                for p in parts
                if not p[0].declared.quantized and p[0].declared.kind == "unquantized" and p[0].disk.quantized
            ]
        )
        if not bad:
            return
        by_cause: dict[str, list[ModuleRow]] = defaultdict(list)
        for r in bad:
            by_cause[r.covered_by or "(no config group targets it)"].append(r)
        # A cause is an ignore entry, or a parenthesised reason (no group targets it, the model builds it unquantized).
        causes = "; ".join(
            f"{_shown([r.name for r in rs])} {c if c.startswith('(') else f'(covered by `{c}`)'}"
            for c, rs in sorted(by_cause.items())
        )
        entries = any(not c.startswith("(") for c in by_cause)
        remedy = (
            f"Remove those entries from `{key}` (or export those modules in BF16)"
            if entries
            else "Export those modules in BF16, or make a config group target them"
        )
        yield self.finding(
            f"{len(bad)} module(s) hold quantized tensors ({bad[0].disk.label}) but vLLM builds them unquantized: "
            f"{causes}. Loading fails on their packed weights and scales. {remedy}.",
            tensors=[r.name for r in bad],
            files=module_files(ctx.ckpt, (r.name for r in bad)) | {ctx.det.config.file},
            details={
                "direction": "declared-unquantized-disk-quantized",
                "modules": {r.name: r.covered_by for r in bad[:200]},
            },
        )

    def _quantized_but_unquantized(self, ctx: Context, parts: list[_Part], key: str, source: str) -> Iterable[Finding]:
        bad = _rows([p for p in parts if p[0].declared.quantized and p[0].disk.kind == "unquantized"])
        if not bad:
            return
        budget = RegexBudget(given_up=ctx.det.slow_patterns)
        traps = {r.name: e for r in bad if (e := _hf_side_entry(ctx, r.name, budget)) is not None}
        family = ctx.det.family
        message = (
            f"{len(bad)} module(s) are stored unquantized ({bad[0].disk.label}) but no `{key}` entry covers them in "
            f"vLLM's naming, so vLLM builds them {bad[0].declared.label} and loads BF16 weights into quantized "
            f"parameters (shape-mismatch error or garbage): {_shown([r.name for r in bad])}."
        )
        if traps:
            name, entry = next(iter(traps.items()))
            vname = family.to_vllm(name)
            hint = f"`re:{re.escape(vname.split('.', 1)[0])}\\..*`" if entry.startswith("re:") else f"`{name}`"
            message += (
                f" `{entry}` matches the checkpoint name `{name}` but vLLM matches against its own name "
                f"`{vname}`; rewrite the entry for vLLM's names (e.g. {hint})."
            )
        else:
            message += f" Add them to `{key}`."
        yield self.finding(
            message,
            tensors=[r.name for r in bad],
            files=module_files(ctx.ckpt, (r.name for r in bad)) | {ctx.det.config.file},
            details={
                "direction": "declared-quantized-disk-unquantized",
                "modules": [r.name for r in bad[:200]],
                "vllm_names": {r.name: family.to_vllm(r.name) for r in bad[:20]},
                "checkpoint_side_matches": dict(list(traps.items())[:50]),
            },
        )

    def _fused_disagree(self, ctx: Context, rows, source: str) -> Iterable[Finding]:
        by_name = {r.name: r for r in rows}
        groups = fused_groups_for(ctx.det.family.id)
        # One pass over the rows: each fused group's shard rows, by parent module, in row order.
        parents_of: list[dict[str, list[ModuleRow]]] = [defaultdict(list) for _ in groups]
        groups_of_shard: dict[str, list[int]] = defaultdict(list)
        for i, group in enumerate(groups):
            for shard in set(group.shards):
                groups_of_shard[shard].append(i)
        for name, row in by_name.items():
            parent, _, last = name.rpartition(".")
            hits = groups_of_shard.get(last)
            if hits and not row.is_expert:
                for i in hits:
                    parents_of[i][parent].append(row)
        mixed: list[tuple[str, list[ModuleRow]]] = []
        for group, parents in zip(groups, parents_of, strict=True):
            for parent, shard_rows in sorted(parents.items()):
                if len({r.declared.quantized for r in shard_rows}) > 1:
                    mixed.append((f"{parent}.{group.fused}", shard_rows))
        if not mixed:
            return
        fused, shard_rows = mixed[0]
        states = ", ".join(
            f"{r.name.rsplit('.', 1)[-1]} {'quantized' if r.declared.quantized else 'unquantized'}" for r in shard_rows
        )
        involved = [r for _, rs in mixed for r in rs]
        yield self.finding(
            f"{len(mixed)} fused layer(s) have shards the config treats differently (e.g. `{fused}`: {states}); vLLM "
            f"refuses to load them (\"Found different quantization schemes for the shards\" / \"Detected some but "
            f"not all shards ... are quantized\"). Ignore or quantize all shards of a fused layer together.",
            tensors=[r.name for r in involved],
            files=module_files(ctx.ckpt, (r.name for r in involved)) | {ctx.det.config.file},
            details={"direction": "fused-shards-disagree", "fused": [f for f, _ in mixed[:100]]},
        )


def _split_drafter(parts: list[_Part], dropped: tuple[str, ...]) -> tuple[list[_Part], list[_Part]]:
    """(parts with the names outside `dropped`, parts with the names under it), each class's names in their order."""
    main: list[_Part] = [(c, [n for n in names if not n.startswith(dropped)]) for c, names in parts]
    drafter: list[_Part] = [(c, [n for n in names if n.startswith(dropped)]) for c, names in parts]
    return main, drafter
