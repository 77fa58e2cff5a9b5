"""Queries on a Parquet dataset in place against the same queries on a merged ``.duckdb``: every named query and
the report, over every rank and over one rank (``--rank``).

    python bench/bench_dataset_queries.py [--ranks 64] [--mb 10] [--runs 3] [--rank 0] [--json OUT]
    python bench/bench_dataset_queries.py --ranks 8 --mb 2 --runs 1      # a smoke run: minutes

The ranks are ``bench_cluster.py``'s (``hta/a100_nccl_rank0`` tiled to about
``--mb`` MB of JSON, copied once per rank with its rank rewritten, kept in
``bench/.data/cluster/``). They are loaded once, by ``tracekit load`` in a
process of its own, into a dataset (``--parquet``) and into a linked ``.duckdb``
(``--link``), both with ``--jobs 2``, and kept beside them for the next run
(``--reload`` loads again).

Four configurations, each run in a child process of its own (so that its peak
RSS is its own), alternating once per run: ``dataset`` and ``duckdb`` read every
rank, ``dataset_rank`` and ``duckdb_rank`` only ``--rank`` (a dataset's views
then list only that rank's partitions; a ``.duckdb``'s filter on ``trace_id``).
Each child opens the source with ``tracekit.load(SOURCE, ranks=...)`` and, per
query, times the open, the query (every named query of ``tracekit queries`` with
its default parameters, drained into Arrow) and the close; then the same for the
report (``tracekit.analysis.report.build``). One query is run first, untimed, so
that imports do not count against the first.

Printed: per query the median seconds of each configuration and the ratios
dataset / duckdb, the sums, the bytes on disk of each source and each
configuration's peak RSS (the child's ``ru_maxrss``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from bench_cluster import DATA, make_ranks  # noqa: E402 - the ranks bench_cluster.py builds

CONFIGS = ("dataset", "duckdb", "dataset_rank", "duckdb_rank")
REPORT = "(report)"


def load(folder: Path, reload: bool) -> tuple[Path, Path]:
    """The dataset and the linked .duckdb of the ranks in ``folder``, loaded once (``reload``: again)."""
    ds = DATA / f"ds_{folder.name}"
    db = DATA / f"db_{folder.name}.duckdb"
    for out, extra in ((ds, ["--parquet"]), (db, ["--link"])):
        done = (out / "tracekit_dataset.json").is_file() if out == ds else out.is_file()
        if done and not reload:
            continue
        shutil.rmtree(out, ignore_errors=True)
        if out.is_file():
            out.unlink()
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "tracekit", "load", str(folder), "-o", str(out), "--jobs", "2", "-q", *extra]
        subprocess.run(cmd, check=True)
        print(f"loaded {out.name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return ds, db


def size(path: Path) -> int:
    """Bytes on disk of a file, or of every file under a folder."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def child(source: str, rank: int | None) -> dict:
    """Every named query and the report over ``source`` (only ``rank`` when given): seconds of each."""
    import tracekit
    from tracekit.analysis import report
    from tracekit.library import queries

    select = {"ranks": [rank]} if rank is not None else {}
    names = sorted(q.id for q in queries.library().values())
    with tracekit.load(source, **select) as trace:  # untimed: imports, the first open
        trace.query_arrow("core.event_counts")
    seconds: dict[str, float] = {}
    for name in names:
        t0 = time.perf_counter()
        with tracekit.load(source, **select) as trace:
            trace.query_arrow(name)
        seconds[name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with tracekit.load(source, **select) as trace:
        report.build([trace], names=[source])
    seconds[REPORT] = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "rss_mb": rss_mb}


def run_child(source: Path, rank: int | None) -> dict:
    cmd = [sys.executable, __file__, "--child", str(source), "" if rank is None else str(rank)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def print_table(measured: dict[str, list[dict]], ranks: int, rank: int, sizes: dict[str, int], runs: int) -> None:
    med = {
        config: {name: statistics.median(r["seconds"][name] for r in runs_of) for name in runs_of[0]["seconds"]}
        for config, runs_of in measured.items()
    }
    rss = {config: statistics.median(r["rss_mb"] for r in runs_of) for config, runs_of in measured.items()}
    print(
        f"{ranks} ranks; dataset {sizes['dataset'] / 1e6:.1f} MB, .duckdb {sizes['duckdb'] / 1e6:.1f} MB on disk; "
        f"{os.cpu_count()} cores, {runs} run(s), medians of open + query + close, seconds"
    )
    print(
        f"{'query':<38}{'dataset':>9}{'duckdb':>9}{'ratio':>7}   {'rank ' + str(rank) + ':':<8}{'dataset':>9}{'duckdb':>9}{'ratio':>7}"
    )
    names = list(med["dataset"])
    total = dict.fromkeys(CONFIGS, 0.0)
    for name in [*sorted(n for n in names if n != REPORT), REPORT]:
        row = {config: med[config][name] for config in CONFIGS}
        if name != REPORT:
            for config in CONFIGS:
                total[config] += row[config]
        print(_row(name, row))
    print(_row("(all queries, summed)", total))
    print(
        f"peak RSS, MB: dataset {rss['dataset']:.0f}, duckdb {rss['duckdb']:.0f}, dataset_rank "
        f"{rss['dataset_rank']:.0f}, duckdb_rank {rss['duckdb_rank']:.0f}"
    )


def _row(name: str, row: dict[str, float]) -> str:
    def ratio(a: float, b: float) -> str:
        return f"{a / b:>6.2f}x" if b > 0 else f"{'-':>7}"

    return (
        f"{name:<38}{row['dataset']:>9.3f}{row['duckdb']:>9.3f}{ratio(row['dataset'], row['duckdb'])}   {'':<8}"
        f"{row['dataset_rank']:>9.3f}{row['duckdb_rank']:>9.3f}{ratio(row['dataset_rank'], row['duckdb_rank'])}"
    )


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        print(json.dumps(child(argv[1], int(argv[2]) if argv[2] else None)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--mb", type=int, default=10, help="uncompressed MB per rank (at least one copy of the source)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rank", type=int, default=0, help="the rank of the one-rank configurations")
    parser.add_argument("--reload", action="store_true", help="load the dataset and the .duckdb again")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    folder = make_ranks(args.ranks, args.mb)
    ds, db = load(folder, args.reload)
    sources = {
        "dataset": (ds, None),
        "duckdb": (db, None),
        "dataset_rank": (ds, args.rank),
        "duckdb_rank": (db, args.rank),
    }
    measured: dict[str, list[dict]] = {config: [] for config in CONFIGS}
    for run in range(args.runs):
        for config in CONFIGS:
            t0 = time.perf_counter()
            measured[config].append(run_child(*sources[config]))
            print(f"run {run + 1} {config}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    sizes = {"dataset": size(ds), "duckdb": size(db)}
    print_table(measured, args.ranks, args.rank, sizes, args.runs)
    if args.json:
        results = {"ranks": args.ranks, "mb": args.mb, "runs": args.runs, "sizes": sizes, "measured": measured}
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
