"""The KV-cache scale tensors of the language model, shared by kv-scale-naming (CK203) and
kv-cache-config-mismatch (CK303)."""

from __future__ import annotations

from ..detect.resolve import component_of
from ..knowledge.kv_scales import attention, is_kv_scale_name
from ._memo import once_per
from .base import Context


@once_per
def kv_tensors(ctx: Context) -> list[str]:
    """KV-cache scale tensors outside the vision tower, sorted. WHY per layout: `is_kv_scale_name` holds only for a
    tensor whose suffix is one of the attention scale suffixes or `output_scale`, and a module's layout lists its
    suffixes, so only the members of layouts holding such a suffix have a tensor to look at."""
    wanted = {*attention().scale_suffixes, "output_scale"}
    layouts, modules, family = ctx.ckpt.layouts, ctx.ckpt.modules, ctx.det.family
    candidates = [
        modules[name]
        for layout, names in zip(layouts.layouts, layouts.members, strict=True)
        if any(suffix in wanted for suffix, _dtype, _shape in layout)
        for name in names
    ]
    return sorted(
        t.name
        for module in candidates
        for suffix, t in module.tensors.items()
        if suffix in wanted and is_kv_scale_name(t.name) and component_of(t.name, family) != "vision"
    )
