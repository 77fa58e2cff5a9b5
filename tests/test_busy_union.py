"""busy_union (the covered time of a union of intervals) against a plain-Python union, on intervals
whose answer is known by construction: nested, identical, touching, zero-length, gaps, several groups."""

from __future__ import annotations

import random

import duckdb
import pytest

from tracekit.common import sqlmodules


def _union(intervals: list[tuple[int, int]]) -> tuple[int, int, int]:
    """(covered ns, first start, last end) by merging the sorted intervals one by one."""
    covered, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:  # a gap (touching intervals merge)
            if cur_end is not None:
                covered += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    covered += cur_end - cur_start
    return covered, min(s for s, _ in intervals), max(e for _, e in intervals)


def _busy(groups: dict[str, list[tuple[int, int]]]) -> dict[str, tuple[int, int, int]]:
    con = duckdb.connect()
    sqlmodules.run(con, "store/base_macros/busy_union", macro="MACRO")
    con.execute("CREATE TABLE iv (grp VARCHAR, ts_ns BIGINT, end_ns BIGINT)")
    con.executemany("INSERT INTO iv VALUES (?, ?, ?)", [(g, s, e) for g, ivs in groups.items() for s, e in ivs])
    return {g: (b, f, last) for g, b, f, last in con.execute("SELECT * FROM busy_union(iv)").fetchall()}


def test_known_layout():
    base = 1_712_195_495_505_582_988  # epoch-scale ns: the sums must not overflow
    groups = {
        "nested_and_identical": [(0, 100), (10, 20), (10, 20), (30, 100)],  # one island of 100
        "touching": [(0, 10), (10, 25), (25, 25), (40, 50)],  # 25 + 10
        "zero_length_alone": [(5, 5), (7, 9)],  # 0 + 2
        "single": [(3, 4)],
    }
    groups = {g: [(base + s, base + e) for s, e in ivs] for g, ivs in groups.items()}
    got = _busy(groups)
    assert {g: v[0] for g, v in got.items()} == {
        "nested_and_identical": 100,
        "touching": 35,
        "zero_length_alone": 2,
        "single": 1,
    }
    assert got == {g: _union(ivs) for g, ivs in groups.items()}


@pytest.mark.parametrize("seed", range(5))
def test_random_intervals_match_a_plain_union(seed):
    rng = random.Random(seed)
    groups = {
        f"g{k}": [
            (s, s + rng.choice([0, 1, rng.randrange(1, 50), rng.randrange(50, 5_000)]))
            for s in (rng.randrange(0, 20_000) for _ in range(rng.randrange(1, 400)))
        ]
        for k in range(4)
    }
    assert _busy(groups) == {g: _union(ivs) for g, ivs in groups.items()}
