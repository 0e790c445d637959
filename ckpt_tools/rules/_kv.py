"""The KV-cache scale tensors of the language model, shared by kv-scale-naming (CK203) and
kv-cache-config-mismatch (CK303)."""

from __future__ import annotations

from ..detect.resolve import component_of
from ..knowledge.kv_scales import attention, is_kv_scale_name
from ._memo import once_per
from .base import Context


@once_per
def kv_tensors(ctx: Context) -> list[str]:
    """KV-cache scale tensors outside the vision tower, sorted."""
    wanted = {*attention().scale_suffixes, "output_scale"}  # the suffixes `is_kv_scale_name` can accept
    family = ctx.det.family
    return sorted(
        t.name
        for module in ctx.ckpt.modules.values()
        for suffix, t in module.tensors.items()
        if suffix in wanted and is_kv_scale_name(t.name) and component_of(t.name, family) != "vision"
    )
