"""Where one load task's fixed cost goes: every statement of ``parallel.load_part``, timed.

    python bench/profile_part.py [TRACE] [--no-link] [--runs 3] [--top 25]

Runs the task a cluster load runs per file (``load_part``: parse, base tables, and the linked
model unless ``--no-link``) on TRACE (default: the tiny synthetic ``math`` variant, so that
what is measured is the fixed cost, not the rows), once untimed (imports, caches) and then
``--runs`` times with every ``execute`` on its connection timed. Prints the statements per
task, the task's wall time, the time inside statements, and the statements (grouped by the
SQL module that ran them, else their first words) that take the most, as the median over the runs.
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


class Timed:
    """A DuckDB connection whose execute() calls are timed into ``log`` (label, seconds)."""

    def __init__(self, con, log: list, where: list):
        self._con, self._log, self._where = con, log, where

    def execute(self, sql, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self._con.execute(sql, *args, **kwargs)
        finally:
            label = f"{self._where[-1]}: {_first_words(sql)[8:60]}" if self._where else _first_words(sql)
            self._log.append((label, time.perf_counter() - t0))

    def __getattr__(self, name):
        return getattr(self._con, name)


def _first_words(sql: str) -> str:
    words = re.sub(r"\s+", " ", re.sub(r"--[^\n]*", "", str(sql))).strip()
    return "python: " + words[:70]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", type=Path)
    parser.add_argument("--no-link", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)

    from tracekit.common import sqlmodules
    from tracekit.store import database, parallel

    work = Path(tempfile.mkdtemp(prefix="tk-profile-part-"))
    trace = args.trace
    if trace is None:
        from synthetic import post_variants

        trace = work / "math.json.gz"
        post_variants(["math"])["math"].write(trace)

    log: list[tuple[str, float]] = []
    where: list[str] = []
    connect = database.connect_writer
    database.connect_writer = lambda *a, **k: Timed(connect(*a, **k), log, where)
    execute = sqlmodules._execute

    def module_execute(con, name, params):
        where.append(f"module {name}")
        try:
            return execute(con, name, params)
        finally:
            where.pop()

    sqlmodules._execute = module_execute

    def task(i: int) -> float:
        t0 = time.perf_counter()
        result = parallel.load_part(i, str(trace), "t", False, str(work / f"part{i}.duckdb"), linked=not args.no_link)
        assert result.part, result.error
        return time.perf_counter() - t0

    task(0)  # imports, rule tables read from disk, DuckDB's first connection
    walls, inside, counts = [], [], []
    per_label: dict[str, list[float]] = collections.defaultdict(list)
    for run in range(1, args.runs + 1):
        log.clear()
        walls.append(task(run))
        counts.append(len(log))
        inside.append(sum(s for _, s in log))
        summed: dict[str, float] = collections.Counter()
        for label, seconds in log:
            summed[label] += seconds
        for label, seconds in summed.items():
            per_label[label].append(seconds)
    size = trace.stat().st_size
    print(f"{trace.name} ({size / 1e6:.2f} MB), linked: {not args.no_link}, {args.runs} runs, medians:")
    print(
        f"statements per task {statistics.median(counts):.0f}, task wall {statistics.median(walls):.3f} s, "
        f"inside statements {statistics.median(inside):.3f} s"
    )
    ranked = sorted(per_label.items(), key=lambda kv: -statistics.median(kv[1]))
    print(f"{'seconds':>8}  {'share':>6}  statement or module")
    total = statistics.median(walls)
    for label, seconds in ranked[: args.top]:
        m = statistics.median(seconds)
        print(f"{m:8.4f}  {100 * m / total:5.1f}%  {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
