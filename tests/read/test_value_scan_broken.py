"""A badly broken checkpoint (random bytes in every block scale: NaN, negative and zero codes everywhere) is measured
at the order of a clean one's cost (issue 27 item 11: 41.6 s where a clean checkpoint of the same size took 5.7 s,
because deleting the plain codes and counting each class in the rest went a byte at a time)."""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import pytest

from ckpt_tools.model.values import FLOAT8_DTYPES, float8_table
from ckpt_tools.read import value_measure as values
from ckpt_tools.read.value_measure import Accumulator


@pytest.mark.parametrize("dtype", sorted(FLOAT8_DTYPES))
def test_class_counts_equal_a_count_per_code(dtype: str) -> None:
    table, step, class_counts = float8_table(dtype), values.COUNT_STEP, values.class_counts
    rng = random.Random(dtype)
    for size in (0, 1, 255, step - 1, step, 2 * step + 17):
        data = bytes(rng.randrange(256) for _ in range(size))
        per_code = Counter(table.classes[c] for c in data)
        assert class_counts(table, data) == [per_code.get(cls, 0) for cls in range(7)]
        assert class_counts(table, memoryview(bytearray(data))) == class_counts(table, data)


def _feed_seconds(piece: bytes, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        acc = Accumulator("F8_E4M3", len(piece), ("rows", 448))
        started = time.perf_counter()
        acc.feed(piece)
        best = min(best, time.perf_counter() - started)
    return best


def test_a_broken_piece_costs_the_order_of_a_clean_one() -> None:
    """Best of five each, 8 MiB in cache. A clean piece is two vector passes (min, max); random bytes took 360-430x
    that before (a translate deleting the plain codes, then a count per class, a byte at a time) and take 9-25x now
    (seven vector comparisons), which beside reading the bytes from storage is the same order."""
    clean = bytes(0x30 + b % 0x4E for b in os.urandom(8 << 20))  # positive normal E4M3 codes
    broken = os.urandom(8 << 20)
    clean_s, broken_s = _feed_seconds(clean), _feed_seconds(broken)
    acc = Accumulator("F8_E4M3", len(broken), ("rows", 448))
    acc.feed(broken)
    assert acc.nan and acc.zero and acc.negative and acc.subnormal  # it did measure the broken codes
    assert broken_s < 60 * clean_s, (broken_s, clean_s)
