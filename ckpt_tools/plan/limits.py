"""What vLLM 0.33 refuses of a serve setting for a given model, before any memory is planned: a tensor-parallel size
that does not divide the heads, a context longer than the config's. One implementation, asked by `ckpt plan` (whose
answer it refuses, with check-serve's finding: ckpt_tools.memory_plan.plan_findings) and by check-serve's checks
(which judge the command, and so serve-flags' own command): the three commands cannot disagree about the same
setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# How many GPUs a suggestion may name: the sizes people serve with.
MAX_SUGGESTED_TP = 16


def first_int(cfg: Mapping[str, Any], *keys: str) -> int | None:
    """The first of `keys` the config holds as an integer (booleans are not)."""
    for k in keys:
        v = cfg.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _split_problem(cfg: Mapping[str, Any], tp: int) -> str | None:
    heads = first_int(cfg, "num_attention_heads", "n_head")
    if heads and heads % tp:
        return (
            f"--tensor-parallel-size {tp} does not divide the {heads} attention heads: vLLM refuses to start "
            f"('Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp}).')"
        )
    nk, nv = first_int(cfg, "linear_num_key_heads"), first_int(cfg, "linear_num_value_heads")
    dk, dv = first_int(cfg, "linear_key_head_dim"), first_int(cfg, "linear_value_head_dim")
    if nk and nv and dk and dv and ((dk * nk * 2 + dv * nv) % tp or nv % tp):
        return (
            f"--tensor-parallel-size {tp} does not divide the linear-attention heads ({nv} value heads): vLLM "
            f"cannot split the GatedDeltaNet layers over {tp} GPUs"
        )
    return None


def tensor_parallel_sizes(cfg: Mapping[str, Any]) -> list[int]:
    """The tensor-parallel sizes up to MAX_SUGGESTED_TP vLLM accepts for a model with this text config."""
    return [n for n in range(1, MAX_SUGGESTED_TP + 1) if _split_problem(cfg, n) is None]


def tensor_parallel_refusal(cfg: Mapping[str, Any], tp: int) -> str | None:
    """Why vLLM refuses `--tensor-parallel-size tp` for a model with this text config (with the sizes that work),
    or None (vllm/config/model.py `ModelConfig.verify_with_parallel_config`, vLLM 0.33.0)."""
    if tp < 1:
        return None  # the flag table's value check (invalid-flag-value) reports it
    problem = _split_problem(cfg, tp)
    if problem is None:
        return None
    return problem + f"; sizes that divide them: {', '.join(map(str, tensor_parallel_sizes(cfg)))}"


def context_refusal(
    asked: int,
    derived: int | None,
    key: str | None,
    *,
    env: str | None = None,
    allowed: bool = False,
    spelled: str | None = None,
) -> str | None:
    """What happens to `--max-model-len asked` (as the user `spelled` it: `8k`) above the context vLLM derives from
    the config (`key`=`derived`): vLLM refuses to start unless `env` (VLLM_ALLOW_LONG_MAX_MODEL_LEN) is set, and
    with it (`allowed`) starts with positions past the trained ones; None when `asked` is within the context
    (vllm/config/model.py `_get_and_verify_max_len`, vLLM 0.33.0, docs/reference/vllm-0.33.md §7.5)."""
    if derived is None or asked <= derived:
        return None
    flag = f"--max-model-len {spelled or asked}"
    where = f"the checkpoint's {key}={derived}" if key else f"the checkpoint's context ({derived})"
    if allowed and env:
        return f"{flag} exceeds {where}; {env} lets it start, but RoPE positions past {derived} may give NaN"
    return (
        f"{flag} exceeds {where}: vLLM raises 'User-specified max_model_len ({asked}) is greater than the derived "
        f"max_model_len'"
        + (f" unless {env}=1 is set (and then RoPE positions past {derived} may give NaN)" if env else "")
    )
