from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..dtypes import FLOAT_HIGH_PRECISION
from .base import Context, Finding, Rule, files_of, register


def tie_flag(ctx: Context) -> tuple[bool | None, str]:
    """`tie_word_embeddings` as the language model sees it: the text config's value for multimodal configs (where the
    language model is built from it), else the top level. None when the config does not say."""
    cfg = ctx.ckpt.config or {}
    text = cfg.get("text_config")
    for where, table in (("text_config", text), ("config.json", cfg)):
        if isinstance(table, dict) and isinstance(table.get("tie_word_embeddings"), bool):
            return table["tie_word_embeddings"], where
    return None, ""


def head_modules(ctx: Context) -> list[str]:
    """Output-head modules: `lm_head` at the root or under a language-model prefix."""
    return sorted(name for name in ctx.ckpt.modules if name.rpartition(".")[2] == "lm_head")


def _stray_heads(ctx: Context) -> list[tuple[str, str]]:
    """(tensor, shard) for output-head tensors stored only in shards the index does not name."""
    return [
        (t.name, shard.name)
        for shard in ctx.ckpt.stray_shards
        for t in shard.tensors
        if t.name.rpartition(".")[0].rpartition(".")[2] == "lm_head"
    ]


def _quantized(ctx: Context, module: str) -> bool:
    tensors = ctx.ckpt.modules[module].tensors
    weight = tensors.get("weight_packed") or tensors.get("weight")
    return weight is None or weight.dtype not in FLOAT_HIGH_PRECISION or len(tensors) > (1 + ("bias" in tensors))


@register
class TiedEmbeddingMismatch(Rule):
    """`tie_word_embeddings` disagrees with the presence of `lm_head.weight`.

    What it catches
    (docs/reference/failures.md #15)
    - `tie_word_embeddings: false` but no `lm_head` tensor at all: the output head has nothing to load;
    - `tie_word_embeddings: true` with a saved `lm_head` (common after quantization): vLLM ties the head to the
      input embedding and skips the saved one; error when the saved head is quantized (packed weight or scales),
      whose extra tensors have no parameter to load into.
    The flag is read from `text_config` for multimodal configs, else from the top level; when the config does not
    set it, nothing is judged (the default differs per model class).

    Why it matters
    An untied model without `lm_head.weight` runs with an uninitialised output projection: vLLM's "weights not
    initialized" check is off for quantized models, so it boots and emits garbage (SGLang: `KeyError:
    'lm_head.weight'`). A tied model that ships a different `lm_head` silently serves the embedding instead of the
    head it was fine-tuned with.

    Anti-pattern
    Exporting a quantized checkpoint whose tool writes (or drops) `lm_head` without updating the flag, or copying
    a base model's config.json onto a fine-tune.

    Fix
    Set `tie_word_embeddings` to what the weights say: `false` when the checkpoint ships its own head (keep it BF16
    and in the ignore list), `true` only when the head is the embedding; for an untied model, export `lm_head.weight`.
    """

    code = "CK305"
    slug = "tied-embedding-mismatch"
    severity = "error"
    title = "tie_word_embeddings disagrees with lm_head"

    def check(self, ctx: Context) -> Iterable[Finding]:
        tied, where = tie_flag(ctx)
        if tied is None:
            return
        heads = head_modules(ctx)
        if not tied and not heads:
            if not any("embed" in m for m in ctx.ckpt.modules):
                return  # not a language model checkpoint (e.g. an adapter or a tower on its own)
            stray = _stray_heads(ctx)
            if stray:
                shards = sorted({shard for _, shard in stray})
                yield self.finding(
                    f"{where} sets tie_word_embeddings = false and `{stray[0][0]}` exists, but only in "
                    f"{', '.join(f'`{s}`' for s in shards)}, a shard the index does not name: vLLM reads only the "
                    f"indexed shards, so the output head is never loaded and the model emits garbage. Add the head's "
                    f"tensors to the index's weight_map (or move them into an indexed shard).",
                    tensors=[name for name, _ in stray],
                    files=[*shards, "config.json"],
                    details={"tie_word_embeddings": False, "where": where, "lm_head": None, "unindexed": shards},
                )
                return
            yield self.finding(
                f"{where} sets tie_word_embeddings = false but the checkpoint has no lm_head tensor: vLLM builds an "
                f"untied output head and never loads it, so the model emits garbage. Export lm_head.weight, or set "
                f"tie_word_embeddings to true if the head is the embedding.",
                files=["config.json"],
                count=1,
                details={"tie_word_embeddings": False, "where": where, "lm_head": None},
            )
        elif tied and heads:
            quantized = [h for h in heads if _quantized(ctx, h)]
            tensors = sorted(f"{h}.{s}" for h in heads for s in ctx.ckpt.modules[h].tensors)
            files = files_of(ctx.ckpt, tensors) | {"config.json"}
            details: dict[str, Any] = {"tie_word_embeddings": True, "where": where, "lm_head": heads}
            if quantized:
                yield self.finding(
                    f"{where} sets tie_word_embeddings = true, but the checkpoint ships a quantized head "
                    f"({', '.join(f'`{h}`' for h in quantized)}: {len(tensors)} tensor(s)): vLLM ties the head to "
                    f"the embedding and has no parameter for the head's packed weight and scales, so loading fails "
                    f"(SGLang and others pick one silently). Set tie_word_embeddings to false and keep lm_head BF16.",
                    tensors=tensors,
                    files=files,
                    details=details,
                )
            else:
                yield self.finding(
                    f"{where} sets tie_word_embeddings = true, but the checkpoint also ships "
                    f"{', '.join(f'`{h}`' for h in heads)}: vLLM serves the input embedding as the output head and "
                    f"ignores the saved one; if they differ, outputs change. Set tie_word_embeddings to false if the "
                    f"head was trained separately, or drop the duplicate head.",
                    tensors=tensors,
                    files=files,
                    severity="warning",
                    details=details,
                )
