"""The context length vLLM derives from a model's config when --max-model-len is not given (shared by the memory plan
and serve-flags)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..knowledge.serving import serving


def derived_max_model_len(text_config: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """The context length vLLM derives from a text config, and the key it came from (rules/serving.toml [context])."""
    rule = serving().context
    best: tuple[float, str | None] = (float("inf"), None)
    for key in rule.max_len_keys:
        value = text_config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < best[0]:
            best = (value, key)
    if best[1] is None:
        return None, None
    length = best[0]
    rope = text_config.get("rope_parameters") or text_config.get("rope_scaling")
    if isinstance(rope, dict):
        kind = rope.get("rope_type") or rope.get("type")
        factor = rope.get("factor")
        if kind not in rule.rope_types_prescaled and isinstance(factor, (int, float)) and factor:
            length *= factor
    return int(length), best[1]
