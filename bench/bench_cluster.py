"""Cluster load benchmark: 8 ranks of ~40 MB with --jobs 1, --jobs 2 (each with and without --link) and --dask local:2.

    python bench/bench_cluster.py [--ranks 8] [--mb 40] [--runs 1] [--json OUT]

The ranks are the real NCCL trace ``hta/a100_nccl_rank0`` tiled in time to
about ``--mb`` MB of JSON (``make_big_trace.py``), copied once per rank with its
``distributedInfo.rank`` rewritten (kept in ``bench/.data/cluster/``). Each
configuration loads the whole folder once per run, alternating, as
``python -m tracekit load`` in a fresh process (its start-up included):

- ``--jobs 1``: one process loads every file, one task after the other, then the merge;
- ``--jobs 2``: two worker processes, one task per file, then the merge;
- ``--jobs 1 --link`` and ``--jobs 2 --link``: the same, each task also links its file
  (the linked model: CPU op stacks, launches, attention stages), the merge renumbers it;
- ``--parquet --dask local:2``: a Dask LocalCluster of two worker processes
  writes a Parquet dataset, each task loading and linking one file (the cluster's
  start-up included).

It prints the median wall time per configuration, the ratio to ``--jobs 1``,
and the MB/s per worker that a prediction for more ranks and cores starts from.
"""

from __future__ import annotations

import argparse
import json
import os
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
    "dask_local2": ["--parquet", "--dask", "local:2"],
}


def make_ranks(ranks: int, mb: int) -> Path:
    """The rank files (built once): one tiled trace, copied with its rank rewritten."""
    folder = DATA / f"{ranks}x{mb}MB"
    if folder.is_dir() and len(list(folder.glob("rank*.json"))) == ranks:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    sys.path.insert(0, str(REPO / "bench"))
    from make_big_trace import tile

    first = folder / "rank0.json"
    tile(SOURCE, first, min_events=0, min_bytes=mb * 1_000_000)
    Path(f"{first}.stats").unlink()
    for r in range(1, ranks):
        with open(first, "rb") as src, open(folder / f"rank{r}.json", "wb") as dst:
            head = src.read(1 << 16)
            dst.write(head.replace(b'"rank": 0', f'"rank": {r}'.encode(), 1))
            shutil.copyfileobj(src, dst, 1 << 20)
    return folder


def run_once(folder: Path, out: Path, args: list[str]) -> float:
    shutil.rmtree(out, ignore_errors=True)
    if out.is_file():
        out.unlink()
    cmd = [sys.executable, "-m", "tracekit", "load", str(folder), "-o", str(out), "-q", *args]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--mb", type=int, default=40, help="uncompressed MB per rank")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    folder = make_ranks(args.ranks, args.mb)
    total_mb = sum(p.stat().st_size for p in folder.glob("rank*.json")) / 1e6
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    for run in range(args.runs):
        for name, extra in CONFIGS.items():
            out = DATA / (f"out_{name}" if "--parquet" in extra else f"out_{name}.duckdb")
            times[name].append(run_once(folder, out, extra))
            print(f"run {run + 1} {name}: {times[name][-1]:.1f} s", file=sys.stderr)
    base = statistics.median(times["jobs1"])
    print(f"{args.ranks} ranks, {total_mb:.0f} MB of JSON, {os.cpu_count()} cores, {args.runs} run(s), medians:")
    base_link = statistics.median(times["jobs1_link"])
    print(f"{'config':<14}{'seconds':>9}{'vs jobs1':>10}{'vs jobs1_link':>14}{'MB/s':>8}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<14}{m:>9.1f}{base / m:>9.2f}x{base_link / m:>13.2f}x{total_mb / m:>8.0f}")
    if args.json:
        args.json.write_text(json.dumps({"ranks": args.ranks, "mb": total_mb, "times": times}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
