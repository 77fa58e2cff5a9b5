"""Cluster load benchmark: strong scaling of 8 ranks, weak scaling 8 -> 64, wall and CPU seconds, the reduce's share.

    python bench/bench_cluster.py [--ranks 8] [--mb 40] [--runs 3] [--weak 8,16,32,64] [--weak-mb 10] [--json OUT]
    python bench/bench_cluster.py --tiny --runs 1 --weak 2,4      # a smoke run: tiny ranks, seconds

The ranks are the real NCCL trace ``hta/a100_nccl_rank0`` tiled in time to
about ``--mb`` MB of JSON (``make_big_trace.py``), copied once per rank with its
``distributedInfo.rank`` rewritten (kept in ``bench/.data/cluster/``); ``--tiny``
uses a 10 KB synthetic attention trace instead (the per-file fixed cost alone).

**Strong scaling** (``--ranks`` files): each configuration loads the whole folder
once per run, alternating, as ``tracekit load`` in a fresh process (start-up and a
Dask LocalCluster's start included):

- ``jobs1`` / ``jobs2``: one process or two worker processes, a task per group of consecutive
  files (``parallel.group_tasks``), then the merge;
- ``jobs1_link`` / ``jobs2_link``: the same with ``--link`` (one link after the merge: the
  reduce includes it);
- ``dask2`` / ``dask2_link``: ``--dask local:2`` into a ``.duckdb``, without and with ``--link``;
- ``parquet_jobs2`` / ``parquet_dask2``: ``--parquet`` with two worker processes or
  ``--dask local:2`` (each task loads and links its files and writes their partitions; the
  commit renames them).

For each: median wall seconds, CPU seconds (the process and every worker it waited for, from
``getrusage``), the ratio to ``jobs1`` / ``jobs1_link``, the extra CPU against one process for
the same rows, the reduce's seconds and share of the wall (``parallel.write_merged`` for a
``.duckdb``, ``dataset._commit`` for a dataset), and the peak RSS of the largest process.

**Weak scaling** (``--weak``): ``jobs2_link`` and ``parquet_dask2`` on 8, 16, 32, 64 ranks of
``--weak-mb`` MB each: wall per rank (flat is perfect scaling), CPU per rank, reduce share, peak RSS.

Each run is one child process (``--child``) that runs ``tracekit load`` in-process with the
reduce timed, so that its ``getrusage`` counts only its own workers. Numbers are only worth
recording from a quiet machine (nothing else running; see "How to read the numbers").
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
DATA = REPO / "bench" / ".data" / "cluster"
SOURCE = REPO.parent / "shared" / "traces" / "hta" / "a100_nccl_rank0.json.gz"

CONFIGS = {
    "jobs1": ["--jobs", "1"],
    "jobs2": ["--jobs", "2"],
    "jobs1_link": ["--jobs", "1", "--link"],
    "jobs2_link": ["--jobs", "2", "--link"],
    "dask2": ["--dask", "local:2"],
    "dask2_link": ["--dask", "local:2", "--link"],
    "parquet_jobs2": ["--parquet", "--jobs", "2"],
    "parquet_dask2": ["--parquet", "--dask", "local:2"],
}
WEAK = ("jobs2_link", "parquet_dask2")


def make_ranks(ranks: int, mb: int, tiny: bool = False) -> Path:
    """The rank files (built once): one tiled trace (or the tiny one), copied with its rank rewritten."""
    folder = DATA / (f"{ranks}xtiny" if tiny else f"{ranks}x{mb}MB")
    if folder.is_dir() and len(list(folder.glob("rank*.json"))) == ranks:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    first = folder / "rank0.json"
    if tiny:
        sys.path.insert(0, str(REPO / "tests"))
        from synthetic import post_variants

        variant = post_variants(["math"])["math"]
        variant.write(first)
        doc = json.loads(first.read_text())
        doc["distributedInfo"] = {"rank": 0, "world_size": ranks}
        first.write_text(json.dumps(doc))
    else:
        sys.path.insert(0, str(REPO / "bench"))
        from make_big_trace import tile

        tile(SOURCE, first, min_events=0, min_bytes=mb * 1_000_000)
        Path(f"{first}.stats").unlink()
    for r in range(1, ranks):
        with open(first, "rb") as src, open(folder / f"rank{r}.json", "wb") as dst:
            head = src.read(1 << 16)
            dst.write(head.replace(b'"rank": 0', f'"rank": {r}'.encode(), 1))
            shutil.copyfileobj(src, dst, 1 << 20)
    return folder


def child(folder: str, out: str, extra: list[str]) -> dict:
    """One load in this process, the reduce timed; what getrusage says of it and its workers."""
    from tracekit.cli import main as tracekit_main
    from tracekit.store import dataset, parallel

    reduce = []

    def timed(fn):
        def run(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                reduce.append(time.perf_counter() - t0)

        return run

    parallel.write_merged = timed(parallel.write_merged)
    dataset._commit = timed(dataset._commit)
    t0 = time.perf_counter()
    code = tracekit_main(["load", folder, "-o", out, "-q", *extra])
    wall = time.perf_counter() - t0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "code": code,
        "wall": wall,
        "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
        "reduce": sum(reduce),
        "rss_mb": max(me.ru_maxrss, kids.ru_maxrss) / 1024,
    }


def run_once(folder: Path, out: Path, args: list[str]) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    if out.is_file():
        out.unlink()
    cmd = [sys.executable, __file__, "--child", str(folder), str(out), *args]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    measured["process_wall"] = time.perf_counter() - t0  # with the interpreter's start and imports
    if measured["code"] != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {measured['code']}: {done.stderr[-2000:]}")
    return measured


def _out(name: str, extra: list[str]) -> Path:
    return DATA / (f"out_{name}" if "--parquet" in extra else f"out_{name}.duckdb")


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def strong(folder: Path, runs: int) -> dict[str, list[dict]]:
    measured: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for run in range(runs):
        for name, extra in CONFIGS.items():
            measured[name].append(run_once(folder, _out(name, extra), extra))
            m = measured[name][-1]
            print(f"run {run + 1} {name}: {m['process_wall']:.1f} s, {m['cpu']:.1f} CPU s", file=sys.stderr)
    return measured


def print_strong(measured: dict[str, list[dict]], ranks: int, total_mb: float, runs: int) -> None:
    print(f"strong scaling: {ranks} ranks, {total_mb:.0f} MB of JSON, {os.cpu_count()} cores, {runs} run(s), medians")
    base = {k: _median(measured[k], "process_wall") for k in ("jobs1", "jobs1_link")}
    base_cpu = {k: _median(measured[k], "cpu") for k in ("jobs1", "jobs1_link")}
    print(
        f"{'config':<15}{'wall s':>8}{'CPU s':>8}{'speed-up':>10}{'extra CPU':>11}{'reduce s':>10}"
        f"{'reduce %':>10}{'peak MB':>9}{'MB/s':>7}"
    )
    for name, runs_of in measured.items():
        linked = "link" in name or "parquet" in name
        ref = "jobs1_link" if linked else "jobs1"
        wall, cpu = _median(runs_of, "process_wall"), _median(runs_of, "cpu")
        reduce = _median(runs_of, "reduce")
        print(
            f"{name:<15}{wall:>8.2f}{cpu:>8.2f}{base[ref] / wall:>9.2f}x{100 * (cpu / base_cpu[ref] - 1):>10.0f}%"
            f"{reduce:>10.2f}{100 * reduce / wall:>9.0f}%{_median(runs_of, 'rss_mb'):>9.0f}{total_mb / wall:>7.0f}"
        )
    print("speed-up and extra CPU against jobs1 (loads) or jobs1_link (linked: *_link, parquet_*)")


def weak(sizes: list[int], mb: int, tiny: bool, runs: int) -> dict[int, dict[str, list[dict]]]:
    measured: dict[int, dict[str, list[dict]]] = {}
    for ranks in sizes:
        folder = make_ranks(ranks, mb, tiny)
        measured[ranks] = {name: [] for name in WEAK}
        for run in range(runs):
            for name in WEAK:
                extra = CONFIGS[name]
                measured[ranks][name].append(run_once(folder, _out(f"weak_{name}", extra), extra))
                m = measured[ranks][name][-1]
                print(f"weak {ranks} ranks run {run + 1} {name}: {m['process_wall']:.1f} s", file=sys.stderr)
    return measured


def print_weak(measured: dict[int, dict[str, list[dict]]], mb_per_rank: str) -> None:
    print(f"weak scaling: {mb_per_rank} per rank, medians")
    print(f"{'ranks':>6}  {'config':<15}{'wall s':>8}{'s/rank':>8}{'CPU s/rank':>11}{'reduce %':>10}{'peak MB':>9}")
    first: dict[str, float] = {}
    for ranks, configs in measured.items():
        for name, runs_of in configs.items():
            wall = _median(runs_of, "process_wall")
            per = wall / ranks
            first.setdefault(name, per)
            print(
                f"{ranks:>6}  {name:<15}{wall:>8.2f}{per:>8.3f}{_median(runs_of, 'cpu') / ranks:>11.3f}"
                f"{100 * _median(runs_of, 'reduce') / wall:>9.0f}%{_median(runs_of, 'rss_mb'):>9.0f}"
                f"   ({per / first[name]:.2f}x the smallest's per-rank time)"
            )


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        print(json.dumps(child(argv[1], argv[2], argv[3:])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=int, default=40, help="uncompressed MB per rank (strong scaling)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--weak", default="", help="rank counts for weak scaling, e.g. 8,16,32,64 (default: none)")
    parser.add_argument("--weak-mb", type=int, default=10, help="uncompressed MB per rank (weak scaling)")
    parser.add_argument("--tiny", action="store_true", help="10 KB synthetic ranks: the fixed cost alone")
    parser.add_argument("--no-strong", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    results: dict = {"cores": os.cpu_count(), "runs": args.runs}
    if not args.no_strong:
        folder = make_ranks(args.ranks, args.mb, args.tiny)
        total_mb = sum(p.stat().st_size for p in folder.glob("rank*.json")) / 1e6
        measured = strong(folder, args.runs)
        print_strong(measured, args.ranks, total_mb, args.runs)
        results["strong"] = {"ranks": args.ranks, "mb": total_mb, "runs": measured}
    if args.weak:
        sizes = [int(x) for x in args.weak.split(",")]
        measured_weak = weak(sizes, args.weak_mb, args.tiny, args.runs)
        print_weak(measured_weak, "10 KB (tiny)" if args.tiny else f"{args.weak_mb} MB")
        results["weak"] = {str(k): v for k, v in measured_weak.items()}
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
