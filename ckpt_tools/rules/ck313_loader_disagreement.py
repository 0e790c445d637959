from __future__ import annotations

from collections.abc import Iterable

from ..detect.matching import RegexBudget, ct_first_match
from .base import Context, Finding, Rule, files_of, register


def _class_targets(ctx: Context) -> list[str]:
    """compressed-tensors config groups that target modules by class name (`Linear`), not by name or regex."""
    groups = (ctx.det.config.data or {}).get("config_groups")
    out = []
    for name, group in groups.items() if isinstance(groups, dict) else ():
        targets = group.get("targets") if isinstance(group, dict) else None
        targets = [targets] if isinstance(targets, str) else targets if isinstance(targets, list) else []
        if any(
            isinstance(t, str) and not t.startswith("re:") and "." not in t and "linear" in t.lower() for t in targets
        ):
            out.append(str(name))
    return out


@register
class LoaderDisagreement(Rule):
    """vLLM and transformers would load the same files differently.

    What it catches
    A compressed-tensors config whose groups target `Linear` by class name while `lm_head` is stored unquantized
    (BF16 / F16 / F32 `lm_head.weight`) and no `ignore` entry names it. vLLM builds the LM head as a
    `ParallelLMHead`, whose class name does not contain "Linear", so no scheme applies and it loads the float head
    as stored (vLLM 0.33 compressed_tensors.py `find_matched_target`). transformers' compressed-tensors loader
    matches every `nn.Linear`, the head included, and expects its quantized tensors.

    Why it matters
    The checkpoint serves in vLLM but does not load as declared in transformers (missing `lm_head.weight_packed` /
    `weight_scale`, or a silently re-initialised head), so evaluation harnesses and fine-tuning scripts built on
    transformers see a different model from the one vLLM serves.

    Anti-pattern
    Writing `ignore: []` (or dropping `lm_head` from it) by hand after an llm-compressor export that kept the head
    in BF16.

    Fix
    Add `lm_head` to the config's `ignore` list: both loaders then keep the head unquantized.
    """

    code = "CK313"
    slug = "loader-disagreement"
    severity = "warning"
    title = "vLLM and transformers would load the checkpoint differently"

    def check(self, ctx: Context) -> Iterable[Finding]:
        det = ctx.det
        if det.producer != "compressed-tensors" or det.rejection:
            return
        groups = _class_targets(ctx)
        head = ctx.ckpt.modules.get("lm_head")
        if not groups or head is None or head.weight is None or head.weight.dtype not in ("BF16", "F16", "F32"):
            return
        raw = det.config.get("ignore")
        entries = [e for e in raw if isinstance(e, str)] if isinstance(raw, list) else []
        if "lm_head" in entries or ct_first_match(
            entries, det.family.to_vllm("lm_head"), det.family, RegexBudget(given_up=det.slow_patterns)
        ):
            return
        yield self.finding(
            f"config group(s) {', '.join(groups)} target `Linear` and `lm_head` is stored {head.weight.dtype} but not "
            f"in `ignore`: vLLM loads the float LM head (a ParallelLMHead takes no compressed-tensors scheme), while "
            f"transformers' compressed-tensors loader expects a quantized `lm_head`. Add `lm_head` to `ignore`.",
            tensors=[head.weight.name],
            files=files_of(ctx.ckpt, [head.weight.name]) | {det.config.file},
            details={"loader": "transformers", "module": "lm_head", "groups": groups},
        )
