from __future__ import annotations

import typer

from .app import app, emit


@app.command("rules")
def list_rules() -> None:
    """List every rule: code, slug, default severity, title."""
    from ..knowledge.serve_checks import checks  # check-serve findings
    from ..rules.base import all_rules

    rows = [(r.code, r.slug, r.severity, "fixable" if r.fixable else "", r.title) for r in all_rules()]
    rows += [(c.code, c.slug, c.severity, "", c.title) for c in checks()]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4] for row in rows]
    emit("\n".join(lines) + "\n")


@app.command("explain")
def explain(code: str = typer.Argument(..., help="Rule code (CK401) or slug (nvfp4-weight-only).")) -> None:
    """Print one rule's documentation: what it catches, why it matters, the anti-pattern and the fix."""
    from ..rules.base import find_rule

    rule = find_rule(code)
    if rule is None:
        from ..knowledge.serve_checks import find_check

        c = find_check(code)
        if c is not None:
            sections = (
                ("What it catches", c.catches),
                ("Why it matters", c.why),
                ("Anti-pattern", c.anti_pattern),
                ("Fix", c.fix),
                ("Source", c.source),
            )
            out = [f"{c.code} {c.slug} ({c.severity}, ckpt check-serve)", "", c.title, ""]
            for heading, body in sections:
                out += [heading, "  " + body, ""]
            emit("\n".join(out))
            return
        from ..errors import UsageError

        raise UsageError(f"no rule {code!r}{_suggestion(code)} (`ckpt rules` lists them)")
    doc = rule.doc_sections()
    out = [f"{rule.code} {rule.slug} ({rule.severity}{', fixable' if rule.fixable else ''})", "", doc["summary"], ""]
    for heading in ("What it catches", "Why it matters", "Anti-pattern", "Fix"):
        if doc.get(heading):
            out += [heading, *("  " + line if line else "" for line in doc[heading].splitlines()), ""]
    emit("\n".join(out))


def _suggestion(asked: str) -> str:
    """`; did you mean CK401 (nvfp4-weight-only)?` for a near miss of a code or slug."""
    import difflib

    from ..knowledge.serve_checks import checks
    from ..rules.base import all_rules

    names = {r.code: r.slug for r in all_rules()} | {c.code: c.slug for c in checks()}
    by_key = {**{code.lower(): code for code in names}, **{slug: code for code, slug in names.items()}}
    key = asked.strip().lower()
    close = difflib.get_close_matches(key, list(by_key), n=3, cutoff=0.6)
    close += [k for k in by_key if key and (k.startswith(key) or key in k) and k not in close]
    codes = list(dict.fromkeys(by_key[k] for k in close))[:3]
    if not codes:
        return ""
    return "; did you mean " + " or ".join(f"{c} ({names[c]})" for c in codes) + "?"
