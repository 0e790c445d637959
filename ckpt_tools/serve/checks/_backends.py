"""What CS140 and CS141 share: the command's forced kernel backends (what each can run is data: rules/kernels.toml
`[forced_backends]`)."""

from __future__ import annotations

from .base import ServeContext


def forced_backends(ctx: ServeContext) -> tuple[str | None, str | None]:
    """(--linear-backend, --moe-backend) as the command sets them, lower-case with underscores."""
    linear = ctx.value("--linear-backend")
    moe = ctx.value("--moe-backend")
    return (
        linear.lower().replace("-", "_") if linear else None,
        moe.lower().replace("-", "_") if moe else None,
    )
