from __future__ import annotations

import typer

from .app import app, emit


@app.command("rules")
def list_rules() -> None:
    """List every rule: code, slug, default severity, title."""
    from ..rules.base import all_rules

    lines = [f"{r.code}  {r.slug:<28} {r.severity:<8} {'fixable ' if r.fixable else '        '}{r.title}"
             for r in all_rules()]
    from ..serve.profiles import checks  # check-serve findings (rules/serve-checks.toml)

    lines += [f"{c.code}  {c.slug:<28} {c.severity:<8}         {c.title}" for c in checks()]
    emit("\n".join(lines) + "\n")


@app.command("explain")
def explain(code: str = typer.Argument(..., help="Rule code (CK401) or slug (nvfp4-weight-only).")) -> None:
    """Print one rule's documentation: what it catches, why it matters, the anti-pattern and the fix."""
    from ..rules.base import find_rule

    rule = find_rule(code)
    if rule is None:
        from ..serve.profiles import find_check

        c = find_check(code)
        if c is not None:
            sections = (("What it catches", c.catches), ("Why it matters", c.why), ("Anti-pattern", c.anti_pattern),
                        ("Fix", c.fix), ("Source", c.source))
            out = [f"{c.code} {c.slug} ({c.severity}, ckpt check-serve)", "", c.title, ""]
            for heading, body in sections:
                out += [heading, "  " + body, ""]
            emit("\n".join(out))
            return
        from ..errors import UsageError

        raise UsageError(f"no rule {code!r}; `ckpt rules` lists them")
    doc = rule.doc_sections()
    out = [f"{rule.code} {rule.slug} ({rule.severity}{', fixable' if rule.fixable else ''})", "", doc["summary"], ""]
    for heading in ("What it catches", "Why it matters", "Anti-pattern", "Fix"):
        if doc.get(heading):
            out += [heading, *("  " + line if line else "" for line in doc[heading].splitlines()), ""]
    emit("\n".join(out))
