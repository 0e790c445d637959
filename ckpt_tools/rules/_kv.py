"""The KV-cache scale tensors of the language model, shared by kv-scale-naming (CK203) and
kv-cache-config-mismatch (CK303)."""

from __future__ import annotations

from ..detect.resolve import component_of
from ..knowledge.kv_scales import is_kv_scale_name
from ._memo import once_per
from .base import Context


@once_per
def kv_tensors(ctx: Context) -> list[str]:
    """KV-cache scale tensors outside the vision tower, sorted."""
    family = ctx.det.family
    return sorted(
        name for name in ctx.ckpt.tensors if is_kv_scale_name(name) and component_of(name, family) != "vision"
    )
