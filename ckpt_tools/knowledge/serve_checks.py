"""rules/serve-checks.toml: the documentation of every `ckpt check-serve` finding (the checks live in serve/)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ._load import Table, build_file

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Check:
    code: str
    slug: str
    severity: str
    title: str
    catches: str
    why: str
    anti_pattern: str
    fix: str
    source: str


def _check(t: Table) -> Check:
    return Check(
        code=t.string("code"),
        slug=t.string("slug"),
        severity=t.choice("severity", SEVERITIES),
        title=t.string("title"),
        catches=t.string("catches"),
        why=t.string("why"),
        anti_pattern=t.string("anti_pattern"),
        fix=t.string("fix"),
        source=t.string("source"),
    )


def parse(root: Table) -> tuple[Check, ...]:
    out = root.each("check", _check, required=True)
    for attr in ("code", "slug"):
        seen: set[str] = set()
        for c in out:
            value = getattr(c, attr)
            if value in seen:
                raise root.error(None, f"duplicate check {attr} {value!r}")
            seen.add(value)
    return out


@cache
def checks() -> tuple[Check, ...]:
    return build_file("serve-checks.toml", parse, "serve-checks/1")


def check(slug: str) -> Check:
    for c in checks():
        if c.slug == slug:
            return c
    raise KeyError(slug)


def find_check(code_or_slug: str) -> Check | None:
    key = code_or_slug.strip()
    for c in checks():
        if key.upper() == c.code or key.lower() == c.slug:
            return c
    return None
