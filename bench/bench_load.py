"""Load benchmark: tracekit against HTA on the same large trace, in the same run.

    python bench/bench_load.py [--trace PATH] [--runs 3] [--hta-python PATH] [--json OUT]

Measured, each as a subprocess timed from spawn to exit, median of --runs runs:

- tracekit: ``python -m tracekit load TRACE -o OUT.duckdb`` (a fresh database each run);
- HTA: ``TraceAnalysis(trace_dir=DIR)`` in HTA's own virtualenv, DIR holding only a
  link to the trace;
- the reopened database: ``python -m tracekit query gpu_timeline OUT.duckdb`` (wall,
  interpreter start included) and, when the Python API exists, ``tracekit.open(db)``
  plus the query timed inside one process;
- not bars, reported beside them: ``tracekit load --link`` (the linked model built at
  load time too) and, on a database loaded without it, the first query that needs the
  linked model (``tracekit query stage_breakdown``: it links, writes, then answers).

Peak RSS comes from ``os.wait4`` on each child: the child's own high-water mark, or
that of a descendant it waited for if higher (the max over the process tree, not a
sum). It never mixes runs, unlike ``RUSAGE_CHILDREN``. HTA parses a single rank in
its own process (its multiprocessing pool starts only for two ranks or more).

Bars: speedup = HTA time / tracekit time >= 10; memory ratio = tracekit RSS / HTA
RSS <= 0.5; gpu_timeline query < 0.5 s (in-process time when available, else the
subprocess wall). Exits 1 when a bar fails.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import make_big_trace

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO / "bench" / ".data" / "big_trace.json"
DEFAULT_HTA_PYTHON = REPO / "bench" / ".venv-hta" / "bin" / "python"
HTA_PACKAGE = "holistictraceanalysis==0.5.0"  # the version the reference numbers come from
MIN_SPEEDUP, MAX_MEMORY_RATIO, MAX_QUERY_S = 10.0, 0.5, 0.5

HTA_DRIVER = """
import sys
from hta.trace_analysis import TraceAnalysis
TraceAnalysis(trace_dir=sys.argv[1])
"""

# Imports stay outside the timed part: this times reopening the database and the query.
# A failure of one measured step is reported, not fatal: the other numbers still print.
QUERY_DRIVER = """
import json, sys, time
import polars, pyarrow  # the API's result types, imported where first used: not what is timed
import tracekit
try:
    opener = getattr(tracekit, "open", None) or tracekit.load
    t0 = time.perf_counter()
    result = opener(sys.argv[1]).query("gpu_timeline")
    # A lazy relation has done no work yet: fetch the rows.
    for fetch in ("fetchall", "to_arrow_table"):
        if hasattr(result, fetch):
            getattr(result, fetch)()
            break
    print(json.dumps({"seconds": time.perf_counter() - t0}))
except Exception as exc:
    print(json.dumps({"skipped": f"{type(exc).__name__}: {exc}"}))
"""


def run_measured(cmd):
    """Run cmd from the repository root; return (wall s, peak RSS MB, stdout)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            tail = err.read()[-3000:].decode(errors="replace")
            sys.exit(f"failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n{tail}")
        return wall, usage.ru_maxrss * 1024 / 1e6, out.read().decode()


def require_tracekit():
    """Exit with a clear message unless ``python -m tracekit`` runs here; compile its bytecode.

    A package pip installs comes with its bytecode (HTA's does); an editable
    checkout is compiled on first import, and not at all where
    PYTHONDONTWRITEBYTECODE is set: every timed run would then compile
    tracekit's sources again (~0.15 CPU s), which no installed copy pays.
    """
    probe = subprocess.run([sys.executable, "-m", "tracekit", "--help"], cwd=REPO, capture_output=True, text=True)
    if probe.returncode != 0:
        sys.exit(
            f"tracekit is not runnable with {sys.executable} (`python -m tracekit --help` "
            f"exited {probe.returncode}); install it first: pip install -e .\n" + probe.stderr[-2000:]
        )
    subprocess.run([sys.executable, "-m", "compileall", "-q", REPO / "tracekit"], cwd=REPO, check=True)


def hta_python(path):
    """The HTA virtualenv's python; the default one is created on first use."""
    path = Path(path)
    if not path.exists():
        if path != DEFAULT_HTA_PYTHON:
            sys.exit(f"--hta-python {path} does not exist")
        venv = path.parent.parent
        print(f"creating {venv} with {HTA_PACKAGE} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([path, "-m", "pip", "install", "-q", HTA_PACKAGE], check=True)
    return path


def trace_events(trace):
    """Event count from make_big_trace's sidecar, None for other traces."""
    stats = Path(f"{trace}.stats")
    return json.loads(stats.read_text())["events"] if stats.exists() else None


def runs_of(label, cmd, runs):
    """Run cmd `runs` times, reporting progress; return the (wall, rss, stdout) list."""
    results = []
    for i in range(runs):
        results.append(run_measured(cmd() if callable(cmd) else cmd))
        print(
            f"  {label} run {i + 1}/{runs}: {results[-1][0]:.2f} s, {results[-1][1]:.0f} MB",
            file=sys.stderr,
        )
    return results


def summary(results, size_mb):
    """Medians and per-run values of a list of (wall, rss, stdout)."""
    walls = [r[0] for r in results]
    rss = [r[1] for r in results]
    wall = statistics.median(walls)
    return {
        "wall_s": wall,
        "mb_per_s": size_mb / wall,
        "rss_mb": statistics.median(rss),
        "runs_wall_s": walls,
        "runs_rss_mb": rss,
    }


def benchmark(trace, runs, hta_py):
    """Run both tools and the query on trace; return every number as a dict."""
    size_mb = trace.stat().st_size / 1e6
    with open(trace, "rb") as f:  # warm the page cache so no tool pays the disk
        while f.read(1 << 24):
            pass
    with tempfile.TemporaryDirectory(prefix="tracekit-bench-") as tmp:
        db = Path(tmp) / "bench.duckdb"

        def fresh_load():
            for stale in (db, Path(f"{db}.wal")):
                stale.unlink(missing_ok=True)
            return [sys.executable, "-m", "tracekit", "load", trace, "-o", db]

        tk = runs_of("tracekit load", fresh_load, runs)
        # Not bars, but what a user waits for next: loading with the linked
        # model built at once, and the first query that needs it on a
        # database loaded without it (it links, writes, then answers).
        full_db = Path(tmp) / "linked.duckdb"
        first_db = Path(tmp) / "first.duckdb"

        def fresh_full():
            for stale in (full_db, Path(f"{full_db}.wal")):
                stale.unlink(missing_ok=True)
            return [sys.executable, "-m", "tracekit", "load", trace, "-o", full_db, "--link"]

        full = runs_of("tracekit load --link", fresh_full, runs)
        first = []
        for i in range(runs):
            for stale in (first_db, Path(f"{first_db}.wal")):
                stale.unlink(missing_ok=True)
            run_measured([sys.executable, "-m", "tracekit", "load", trace, "-o", first_db, "-q"])
            first += runs_of(
                f"first linked query ({i + 1})",
                [sys.executable, "-m", "tracekit", "query", "stage_breakdown", first_db],
                1,
            )
        query = runs_of("tracekit query", [sys.executable, "-m", "tracekit", "query", "gpu_timeline", db], runs)
        inproc = [json.loads(r[2]) for r in runs_of("in-process query", [sys.executable, "-c", QUERY_DRIVER, db], runs)]

        hta_dir = Path(tmp) / "hta"
        hta_dir.mkdir()
        # HTA takes every *.json / *.gz in the directory as one rank's trace.
        (hta_dir / ("trace.json.gz" if trace.suffix == ".gz" else "trace.json")).symlink_to(trace)
        hta = runs_of("HTA load", [hta_py, "-c", HTA_DRIVER, hta_dir], runs)

    result = {
        "trace": str(trace),
        "size_mb": size_mb,
        "events": trace_events(trace),
        "runs": runs,
        "tracekit": summary(tk, size_mb),
        "hta": summary(hta, size_mb),
        "load_link": summary(full, size_mb),
        "first_linked_query": summary(first, size_mb),
        "query_subprocess_s": statistics.median(r[0] for r in query),
        "query_inprocess_s": (statistics.median(r["seconds"] for r in inproc) if "seconds" in inproc[0] else None),
        "query_inprocess_note": inproc[0].get("skipped"),
    }
    result["speedup"] = result["hta"]["wall_s"] / result["tracekit"]["wall_s"]
    result["load_link_speedup"] = result["hta"]["wall_s"] / result["load_link"]["wall_s"]
    result["memory_ratio"] = result["tracekit"]["rss_mb"] / result["hta"]["rss_mb"]
    inproc_s = result["query_inprocess_s"]
    result["query_s"] = result["query_subprocess_s"] if inproc_s is None else inproc_s
    result["query_bar_on"] = "subprocess" if inproc_s is None else "in-process"
    result["pass"] = {
        "speedup": result["speedup"] >= MIN_SPEEDUP,
        "memory_ratio": result["memory_ratio"] <= MAX_MEMORY_RATIO,
        "query": result["query_s"] < MAX_QUERY_S,
    }
    return result


def report(r):
    """The results as a plain-text table."""
    tk, hta, ok = r["tracekit"], r["hta"], r["pass"]
    events = f"{r['events']:,}" if r["events"] else "n/a"
    inproc = (
        f"{r['query_inprocess_s']:.3f} s"
        if r["query_inprocess_s"] is not None
        else f"n/a ({r['query_inprocess_note']})"
    )
    bars = [
        (
            "speedup = HTA time / tracekit time",
            f"{r['speedup']:.1f}x",
            f">= {MIN_SPEEDUP:g}x",
            ok["speedup"],
        ),
        (
            "memory ratio = tracekit RSS / HTA RSS",
            f"{r['memory_ratio']:.2f}",
            f"<= {MAX_MEMORY_RATIO:g}",
            ok["memory_ratio"],
        ),
        (
            f"gpu_timeline query ({r['query_bar_on']})",
            f"{r['query_s']:.3f} s",
            f"< {MAX_QUERY_S:g} s",
            ok["query"],
        ),
    ]
    return "\n".join(
        [
            f"trace  {r['trace']}",
            f"input  {r['size_mb']:.1f} MB, {events} events; medians of {r['runs']} runs",
            "",
            f"{'':20}{'tracekit':>10}{'HTA':>10}",
            f"{'load time (s)':20}{tk['wall_s']:>10.2f}{hta['wall_s']:>10.2f}",
            f"{'throughput (MB/s)':20}{tk['mb_per_s']:>10.1f}{hta['mb_per_s']:>10.1f}",
            f"{'peak RSS (MB)':20}{tk['rss_mb']:>10.0f}{hta['rss_mb']:>10.0f}",
            "",
            f"load --link (linked model built too): {r['load_link']['wall_s']:.2f} s, "
            f"{r['load_link']['rss_mb']:.0f} MB, {r['load_link_speedup']:.1f}x faster than HTA",
            f"first query that needs the linked model (stage_breakdown, links then answers): "
            f"{r['first_linked_query']['wall_s']:.2f} s, {r['first_linked_query']['rss_mb']:.0f} MB",
            f"gpu_timeline query: subprocess {r['query_subprocess_s']:.3f} s, in-process {inproc}",
            "",
            *(f"{name:40}{value:>9}  bar {bar:7} {'PASS' if passed else 'FAIL'}" for name, value, bar, passed in bars),
        ]
    )


def main(argv=None):
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trace",
        type=Path,
        help=f"trace to load (default: {DEFAULT_TRACE.relative_to(REPO)}, built by make_big_trace.py when missing)",
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--hta-python",
        type=Path,
        default=DEFAULT_HTA_PYTHON,
        help="python of a virtualenv with holistictraceanalysis",
    )
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    trace = (args.trace or DEFAULT_TRACE).resolve()
    if args.trace is not None and not trace.exists():
        sys.exit(f"trace {trace} does not exist")
    require_tracekit()
    hta_py = hta_python(args.hta_python)
    if not trace.exists():
        print(f"building {trace} ...", file=sys.stderr)
        make_big_trace.tile(make_big_trace.DEFAULT_SRC, trace)

    result = benchmark(trace, args.runs, hta_py)
    print(report(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if all(result["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
