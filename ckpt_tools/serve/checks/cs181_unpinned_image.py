from __future__ import annotations

from collections.abc import Iterable

from ...rules.base import Finding
from .base import ServeCheck, ServeContext, register


@register
class UnpinnedImage(ServeCheck):
    """A container image named by a moving tag instead of a pinned build.

    What it catches
    A `docker run` image reference by :latest, or with no tag at all, instead of a pinned build tag.

    Why it matters
    :latest has moved between vLLM 0.23.0 and 0.27.1 builds with different flags and env vars; what the command
    means changes under it, and the check ran against one profile only.

    Anti-pattern
    ghcr.io/aeon-7/aeon-vllm-ultimate:latest in a compose file.

    Fix
    Pin the build tag of the runtime profile checked against (given with the finding).

    Source
    the AEON vLLM-Ultimate DGX Spark image README (Pull the image); the AEON-7 Qwen3.6-35B-A3B NVFP4 model card
    (TL;DR)
    """

    code = "CS181"
    slug = "unpinned-image"
    severity = "info"
    title = "Moving image tag"

    def check(self, ctx: ServeContext) -> Iterable[Finding]:
        image = ctx.cmd.image
        if image is None:
            return
        tail = image.rsplit("/", 1)[-1]
        if ":" not in tail or tail.endswith(":latest"):
            yield self.finding(f"{image} is a moving tag; this check used {ctx.rt.id}", fix=ctx.rt.image)
