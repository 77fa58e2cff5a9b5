"""Output at scale: time and peak RSS of writing N rows in every format.

    python bench/bench_output.py [--rows 1000000] [--runs 3] [--formats table,csv,json,ndjson,parquet]

Each run is ``tracekit sql SAMPLE "SELECT ... FROM range(N)" -f FMT --rows 0`` as a fresh process
(stdout to /dev/null; parquet with ``-o -``), so it measures what
a user waits for: the query, Arrow batches and the writer. Rows are five columns like a query's
(an id, a trace label, a kernel name, a duration and a percentage). Formats alternate within each
round, so a machine that speeds up or slows down hits them all. Prints every run and, per format,
the median wall seconds, CPU seconds (user + sys) and peak RSS (10⁶ bytes, ``os.wait4``).

The promise it checks (``docs/safety.md``): time linear in the rows and memory that does not grow
with them, the ``table`` format included (it fits its widths on the first rows, then streams).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_traces" / "gpu_a100_synthetic" / "flash.json.gz"
FORMATS = ("table", "csv", "json", "ndjson", "parquet")
SQL = (
    "SELECT i AS row_id, 'trace_' || (i % 7) AS trace, 'at::native::kernel<' || (i % 1000) || ', float>(int)' "
    "AS name, i * 1000 AS gpu_ns, i / 3.0 AS share_pct FROM range({n}) t(i)"
)


def run(fmt: str, rows: int, cache: str) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS in 10⁶ bytes) of one output run."""
    cmd = [sys.executable, "-m", "tracekit", "sql", str(SAMPLE), SQL.format(n=rows), "-f", fmt, "--rows", "0"]
    if fmt == "parquet":
        cmd += ["-o", "-"]  # binary: into the pipe
    env = {**os.environ, "TRACEKIT_CACHE_DIR": cache, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{fmt}: exit {os.waitstatus_to_exitcode(status)}: {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024 / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--formats", default=",".join(FORMATS))
    args = ap.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    results: dict[str, list[tuple[float, float, float]]] = {f: [] for f in formats}
    with tempfile.TemporaryDirectory() as cache:
        run("csv", 10, cache)  # the sample's cache entry, made once before timing
        for k in range(args.runs):
            for fmt in formats:
                wall, cpu, rss = run(fmt, args.rows, cache)
                results[fmt].append((wall, cpu, rss))
                print(f"run {k + 1} {fmt:8} wall {wall:7.2f} s  cpu {cpu:7.2f} s  rss {rss:8.1f} MB", flush=True)
    print(f"\n{args.rows:,} rows, median of {args.runs} runs (load: {os.getloadavg()[0]:.2f})")
    print(f"{'format':8}  {'wall_s':>7}  {'cpu_s':>7}  {'peak_rss_MB':>11}")
    for fmt, runs in results.items():
        wall, cpu, rss = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{fmt:8}  {wall:7.2f}  {cpu:7.2f}  {rss:11.1f}")


if __name__ == "__main__":
    main()
