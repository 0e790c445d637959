from __future__ import annotations

import typer

from .app import app, emit
from .options import complete_rule


@app.command("rules", short_help="List every rule: code, slug, severity, title.")
def list_rules() -> None:
    """List every rule: code, slug, default severity, title (the CK rules, then check-serve's CS checks)."""
    from ..docs import every_check

    rows = [(r.code, r.slug, r.severity, "fixable" if r.fixable else "", r.title) for r in every_check()]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4] for row in rows]
    emit("\n".join(lines) + "\n")


@app.command("explain", short_help="Print one rule's documentation.")
def explain(
    code: str = typer.Argument(
        ..., metavar="CODE", help="Rule code (CK401) or slug (nvfp4-weight-only).", autocompletion=complete_rule
    ),
) -> None:
    """Print one rule's documentation: what it catches, why it matters, the anti-pattern and the fix."""
    from ..docs import find_check
    from ..rules.base import DOC_SECTIONS

    rule = find_check(code)
    if rule is None:
        from ..errors import UsageError

        raise UsageError(f"no rule {code!r}{_suggestion(code)} (`ckpt rules` lists them)")
    doc = rule.doc_sections()
    tags = [rule.severity] + (["fixable"] if rule.fixable else []) + ([rule.reported_by] if rule.reported_by else [])
    out = [f"{rule.code} {rule.slug} ({', '.join(tags)})", "", doc["summary"], ""]
    for heading in DOC_SECTIONS:
        if doc.get(heading):
            out += [heading, *("  " + line if line else "" for line in doc[heading].splitlines()), ""]
    emit("\n".join(out))


def _suggestion(asked: str) -> str:
    """`; did you mean CK401 (nvfp4-weight-only)?` for a near miss of a code or slug. What the asked text starts
    (`CS12` -> CS120, CS121, CS122) ranks before what merely looks like it (CS172), then what contains it."""
    import difflib

    from ..docs import every_check

    names = {r.code: r.slug for r in every_check()}
    by_key = {**{code.lower(): code for code in names}, **{slug: code for code, slug in names.items()}}
    key = asked.strip().lower()
    prefixed = sorted(k for k in by_key if key and k.startswith(key))
    close = difflib.get_close_matches(key, list(by_key), n=3, cutoff=0.6)
    inside = [k for k in by_key if key and key in k]
    codes = list(dict.fromkeys(by_key[k] for k in [*prefixed, *close, *inside]))[:3]
    if not codes:
        return ""
    return "; did you mean " + " or ".join(f"{c} ({names[c]})" for c in codes) + "?"
