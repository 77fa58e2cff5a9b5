"""``link.inside`` (the CPU slices within spans on a thread, by runs of axis numbers) against its
definition, computed by brute force: a slice is inside a span on its lane when it starts at or after the
span's start and ends at most ``BLEED_NS`` after its end.

Synthetic axes, random but seeded: three lanes of slices on a coarse grid (equal starts, zero durations,
ends within ``BLEED_NS`` of a span's end), numbered in ``_axis``'s order, with the lanes spread apart on
the axis or not (the keyed case); spans that start and end on slices or anywhere, nest, overlap, hold
nothing or lie beyond every slice.
"""

from __future__ import annotations

import random

import duckdb
import pytest

from tracekit.common import sqlmodules
from tracekit.model import link

GRID = 250  # ns: a quarter of BLEED_NS, so ends within the bleed are common


def _axis(rng: random.Random, spread: int) -> list[tuple[int, int, int, int, int]]:
    """(id, lane, k0, k1, pos) in _axis's order: lane, start, longer first, id."""
    rows = []
    for lane in (1, 2, 3):
        for _ in range(rng.randint(0, 120)):
            ts = GRID * rng.randint(0, 200)
            rows.append((len(rows) + 1, lane, lane * spread + ts, lane * spread + ts + GRID * rng.randint(0, 30)))
    rows.sort(key=lambda r: (r[1], r[2], -(r[3] - r[2]), r[0]))
    return [(*r, pos) for pos, r in enumerate(rows, start=1)]


def _spans(rng: random.Random, axis, spread: int) -> list[tuple[int, int, int, int]]:
    """(key, lane, start, end): from a slice's start to a later slice's end, or anywhere on the grid."""
    spans = []
    for key in range(1, 60):
        lane = rng.choice((1, 2, 3))
        on_lane = [r for r in axis if r[1] == lane]
        if on_lane and rng.random() < 0.6:
            a, z = sorted(rng.sample(on_lane, 2) if len(on_lane) > 1 else on_lane * 2, key=lambda r: r[4])
            spans.append((key, lane, a[2], max(a[3], z[3])))
        else:
            s0 = lane * spread + GRID * rng.randint(-5, 230)
            spans.append((key, lane, s0, s0 + GRID * rng.randint(0, 60)))
    return spans


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("spread", [1 << 20, 0], ids=["lanes_apart", "keyed"])
def test_inside_is_its_definition_on_random_axes_by_construction(seed, spread):
    rng = random.Random(seed)
    axis = _axis(rng, spread)
    spans = _spans(rng, axis, spread)
    con = duckdb.connect()
    con.execute("CREATE TEMP TABLE _cpu (id BIGINT, lane BIGINT, k0 BIGINT, k1 BIGINT, pos BIGINT)")
    if axis:
        con.executemany("INSERT INTO _cpu VALUES (?, ?, ?, ?, ?)", axis)
    con.execute("CREATE TEMP TABLE spans (key BIGINT, lane BIGINT, a BIGINT, b BIGINT)")
    con.executemany("INSERT INTO spans VALUES (?, ?, ?, ?)", spans)
    inside = sqlmodules.text("model/inside", spans="spans", key="key", start="a", end="b", bleed=link.BLEED_NS)
    got = sorted(con.execute(inside).fetchall())
    want = sorted(
        (x, key, pos)
        for key, lane, s0, s1 in spans
        for x, x_lane, k0, k1, pos in axis
        if x_lane == lane and k0 >= s0 and k1 <= s1 + link.BLEED_NS
    )
    assert got == want
    assert len(want) > 100  # not vacuous: the spans hold slices
