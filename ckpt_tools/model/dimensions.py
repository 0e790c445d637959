"""The shapes a model config gives its projections: what a checkpoint's tensors are measured against."""

from __future__ import annotations

from .checkpoint import Checkpoint


def config_features(ckpt: Checkpoint, name: str) -> tuple[int, int] | None:
    """(out, in) features the model config gives a projection, for the standard attention / MLP / expert names."""

    def num(key: str) -> int | None:
        v = ckpt.config_value(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    hidden, heads = num("hidden_size"), num("num_attention_heads")
    if hidden is None:
        return None
    head_dim = num("head_dim") or (hidden // heads if heads else None)
    proj = name.rsplit(".", 1)[-1]
    if ".experts." in name:
        inter = num("moe_intermediate_size")
    elif ".shared_expert." in name:
        inter = num("shared_expert_intermediate_size")
    else:
        inter = num("intermediate_size")
    if ".self_attn." in name and heads and head_dim:
        kv = num("num_key_value_heads") or heads
        return {
            "q_proj": (heads * head_dim, hidden),
            "k_proj": (kv * head_dim, hidden),
            "v_proj": (kv * head_dim, hidden),
            "o_proj": (hidden, heads * head_dim),
        }.get(proj)
    if ".mlp." in name and inter:
        return {"gate_proj": (inter, hidden), "up_proj": (inter, hidden), "down_proj": (hidden, inter)}.get(proj)
    return None
