"""A load accounting per layer, as `ckpt inspect` shows it: how many tensors load, are skipped or are fatal, how
many parameters stay unfilled, and the tensors / parameters with a problem."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .accounting import LoadAccounting, ParameterFill, TensorFate, is_exempt

_LAYER = re.compile(r"^(.*?\.(?:layers|blocks|h)\.\d+)\.")  # a layer prefix, up to and including the layer index
_MAX_PROBLEMS = 5  # problem lines per layer in text


@dataclass(frozen=True)
class LayerLoad:
    layer: str  # the layer prefix, or `(other)` for names outside numbered layers
    loaded: int
    skipped: int
    fatal: int
    unfilled: int  # parameters no tensor fills (exempt ones not counted)
    problems: tuple[str, ...]  # "name: what" for every fatal / misfit / cast tensor and unfilled parameter

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "loaded": self.loaded,
            "skipped": self.skipped,
            "fatal": self.fatal,
            "unfilled": self.unfilled,
            "problems": list(self.problems),
        }


def _layer(name: str) -> str:
    m = _LAYER.match(name)
    return m.group(1) if m else "(other)"


def _fate_problem(f: TensorFate) -> str | None:
    if f.fate != "fatal" and f.problem is None:
        return None
    what = f.error or (f"{f.problem}: {f.reason}" if f.problem and f.reason else f.problem or f.reason or f.fate)
    by = f" (reported as {f.owner})" if f.owner else ""
    return f"{f.tensor}: {f.fate}, {what}{by}"


def _fill_problem(p: ParameterFill) -> str | None:
    if (p.filled and not p.partial) or is_exempt(p):
        return None
    part = f" (parts {', '.join(p.partial)})" if p.partial else ""
    by = f" (reported as {p.owner})" if p.owner else ""
    return f"{p.parameter}{part}: unfilled{by}"


def tensors_per_layer(names: Iterable[str], sizes: Iterable[int]) -> dict[str, int]:
    """Tensors per layer, from module names and their tensor counts."""
    out: dict[str, int] = {}
    for name, n in zip(names, sizes, strict=True):
        layer = _layer(name + ".")
        out[layer] = out.get(layer, 0) + n
    return out


def per_layer(acc: LoadAccounting, totals: Mapping[str, int] | None = None) -> tuple[LayerLoad, ...]:
    """The accounting per layer. With `totals` (tensors per layer, `tensors_per_layer`), `acc` may hold only what
    is not a plain load (`load_accounting(..., every_tensor=False)`): the loaded count is what the rest leaves."""
    if acc.build_error is not None:  # nothing is loaded
        return ()
    counts: dict[str, list[int]] = {layer: [n, 0, 0, 0] for layer, n in (totals or {}).items()}
    problems: dict[str, list[str]] = {}
    index = {"loaded": 0, "skipped": 1, "fatal": 2}
    for f in acc.tensors:
        if totals is not None and f.fate != "loaded":  # counted as loaded in the totals: move it
            counts.setdefault(_layer(f.tensor), [0, 0, 0, 0])[0] -= 1
        layer = _layer(f.tensor)
        if totals is None or f.fate != "loaded":
            counts.setdefault(layer, [0, 0, 0, 0])[index[f.fate]] += 1
        line = _fate_problem(f)
        if line:
            problems.setdefault(layer, []).append(line)
    for p in acc.parameters:
        line = _fill_problem(p)
        if line:
            layer = _layer(p.parameter)
            counts.setdefault(layer, [0, 0, 0, 0])[3] += 1
            problems.setdefault(layer, []).append(line)

    def natural(name: str) -> list[int | str]:
        return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name)]

    return tuple(
        LayerLoad(layer, c[0], c[1], c[2], c[3], tuple(problems.get(layer, ())))
        for layer, c in sorted(counts.items(), key=lambda kv: natural(kv[0]))
    )


def text_lines(acc: LoadAccounting, layers: tuple[LayerLoad, ...]) -> list[str]:
    """The `ckpt inspect` section: totals, then the layers with a problem and their problem lines."""
    head = f"vLLM load ({'load model of ' if acc.judge == 'model' else ''}{acc.judged_by}):"
    if acc.build_error:
        return [head, f"  the model cannot be built: {acc.build_error}"]
    total = [sum(getattr(r, k) for r in layers) for k in ("loaded", "skipped", "fatal", "unfilled")]
    out = [
        head,
        f"  {total[0]:,} tensors loaded, {total[1]:,} skipped, {total[2]:,} fatal; {total[3]:,} parameters unfilled",
    ]
    for r in layers:
        if not r.problems:
            continue
        out.append(f"  {r.layer:<48} {r.loaded} loaded, {r.skipped} skipped, {r.fatal} fatal, {r.unfilled} unfilled")
        out += [f"    {line}" for line in r.problems[:_MAX_PROBLEMS]]
        if len(r.problems) > _MAX_PROBLEMS:
            out.append(f"    ... and {len(r.problems) - _MAX_PROBLEMS} more")
    return out
