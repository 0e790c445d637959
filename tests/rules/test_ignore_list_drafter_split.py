"""ignore-list-mismatch splits each row class's members into the main model's and the MTP drafter's (the family's
dropped prefixes) with one C-level pass per class; held here to the per-name reference on classes whose members
differ: none under a dropped prefix, all of them, a mix in either order, several prefixes, and an empty class."""

from __future__ import annotations

from ckpt_tools.detect.resolve import RowClass
from ckpt_tools.model.schemes import UNQUANTIZED
from ckpt_tools.rules.ck301_ignore_list_mismatch import _split_drafter


def _cls(*names: str) -> RowClass:
    return RowClass(0, "text", UNQUANTIZED, UNQUANTIZED, None, None, tuple(names) or ("x",))


def test_split_matches_the_per_name_reference() -> None:
    dropped = ("mtp.", "model.mtp.")
    parts = [
        (_cls("model.layers.0.q", "model.layers.1.q"), ("model.layers.0.q", "model.layers.1.q")),
        (_cls("mtp.layers.0.q"), ("mtp.layers.0.q",)),
        (_cls(), ["model.layers.2.q", "mtp.layers.1.q", "model.layers.3.q", "model.mtp.fc", "mtpx.q"]),
        (_cls(), ["mtp.a", "model.layers.4.q"]),
        (_cls(), []),
    ]
    main, drafter = _split_drafter(parts, dropped)
    assert [(c, list(n)) for c, n in main] == [
        (c, [n for n in names if not n.startswith(dropped)]) for c, names in parts
    ]
    assert [(c, list(n)) for c, n in drafter] == [
        (c, [n for n in names if n.startswith(dropped)]) for c, names in parts
    ]
    assert [list(n) for _, n in drafter] == [[], ["mtp.layers.0.q"], ["mtp.layers.1.q", "model.mtp.fc"], ["mtp.a"], []]
