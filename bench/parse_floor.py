"""The parse's floor on this machine, beside the first answer it is part of.

    python bench/parse_floor.py [--tiles 22 | --trace PATH] [--runs 3] [--no-stages]

Stages the trace once (as ``tracekit`` does) and then, alternating, reads its
parts into a TEMP table with DuckDB's ``read_json``, in these forms:

- ``typed read``: the SELECT ``ingest`` runs (``scan.typed_sql``: every
  EVENT_SPEC key typed, nanoseconds, the args' ids, the ``:`` proof);
- ``all keys``: ``read_json`` of every EVENT_SPEC key and nothing more, the
  floor for a parse that keeps every key;
- ``no args`` / ``args only``: the same read without ``args`` / of ``args``
  alone, which shows what a narrower read would save (nothing: a key that
  ``columns`` does not name costs more to skip than to read);

and, unless ``--no-stages``, ``tracekit stages TRACE`` on an empty cache as a
subprocess in the same rounds, so the parse's share of the first answer is read
in one run. Prints medians of wall and CPU seconds (CPU: this process's, all
threads; for ``stages``, the child's user + sys).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_first_answer  # noqa: E402
import bench_load  # noqa: E402
import duckdb  # noqa: E402

from tracekit.common.sqltext import constant  # noqa: E402
from tracekit.ingest import scan  # noqa: E402


def _read_json(parts: list[Path], keys: dict[str, str]) -> str:
    return (
        f"SELECT * FROM read_json({constant([str(p) for p in parts])}, format = 'array', columns = {constant(keys)}, "
        f"maximum_object_size = {scan.MAX_EVENT_BYTES})"
    )


def reads(staged: scan.StagedTrace) -> dict[str, str]:
    """The SELECTs timed, by label."""
    spec = scan.EVENT_SPEC
    return {
        "typed read": scan.typed_sql([staged]),
        "all keys": _read_json(staged.parts, spec),
        "no args": _read_json(staged.parts, {k: t for k, t in spec.items() if k != "args"}),
        "args only": _read_json(staged.parts, {"args": spec["args"]}),
    }


def _stages(trace: Path, tmp: Path, i: int) -> tuple[float, float]:
    """``tracekit stages`` in a child on an empty cache (``bench_load.run_measured``): wall and CPU
    (user + sys) seconds."""
    os.environ["TRACEKIT_CACHE_DIR"] = str(tmp / f"cache-{i}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, _, _ = bench_load.run_measured([sys.executable, "-m", "tracekit", "stages", trace])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child, reaped by run_measured's wait4
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", type=int, default=22)
    parser.add_argument("--trace", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-stages", action="store_true")
    args = parser.parse_args(argv)
    trace = args.trace or bench_first_answer.trace_of(args.tiles)
    if not args.no_stages:
        bench_load.require_tracekit()  # its bytecode compiled once, as bench_first_answer does
    times: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tracekit-parse-") as tmp:
        t, c = time.perf_counter(), time.process_time()
        staged = scan.stage(trace, Path(tmp), "t1")
        times["staging (once)"] = [(time.perf_counter() - t, time.process_time() - c)]
        con = duckdb.connect()
        con.execute("SET threads = 2")
        selects = reads(staged)
        for i in range(args.runs):
            for label, sql in selects.items():
                t, c = time.perf_counter(), time.process_time()
                con.execute(f"CREATE OR REPLACE TEMP TABLE _parsed AS {sql}")
                times.setdefault(label, []).append((time.perf_counter() - t, time.process_time() - c))
                con.execute("DROP TABLE _parsed")
            if not args.no_stages:
                times.setdefault("tracekit stages", []).append(_stages(trace, Path(tmp), i))
            print(f"  round {i + 1}/{args.runs} done", file=sys.stderr)
    mb = trace.stat().st_size / 1e6
    print(
        f"{trace.name}: {mb:.1f} MB, medians of {args.runs} alternating runs (DuckDB {duckdb.__version__}, 2 threads)"
    )
    print(f"{'':>18}{'wall s':>8}{'CPU s':>7}{'MB/s':>7}   runs (wall s)")
    for label, runs in times.items():
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"{label:>18}{wall:>8.2f}{cpu:>7.2f}{mb / wall:>7.0f}   {' / '.join(f'{r[0]:.2f}' for r in runs)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
