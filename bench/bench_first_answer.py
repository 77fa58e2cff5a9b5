"""Time to the first attention answer: tracekit against HTA (and TraceLens) on raw traces.

    python bench/bench_first_answer.py [--tiles 1,3,9,27] [--headline-tiles 22] [--runs 3]
                                       [--hta-python PATH] [--tracelens-python PATH] [--json OUT]

A user's first question is asked of a raw trace, not of a loaded database, so
every run starts from an empty tracekit cache and pays parse + link +
attribution + answer. Measured per size, each as a subprocess from spawn to
exit (peak RSS of the process tree via ``os.wait4``), runs alternating between
the tools so drift on a shared machine hits all of them:

- tracekit ``stages TRACE`` (the stage breakdown and the attention calls);
- tracekit ``report TRACE --json OUT`` (every headline number and finding);
- HTA: ``TraceAnalysis(trace_dir)`` + ``get_gpu_kernel_breakdown()``;
- TraceLens ``generate_perf_report_pytorch`` when ``--tracelens-python`` names a
  Python that can import it (it installs from its git repository, which this
  machine cannot reach: skipped with a note otherwise).

Sizes are the v100_ns_resolution trace tiled in time by ``make_big_trace`` (every
link kept unique); ``--headline-tiles`` (22: the 304 MB load-benchmark trace) is
the size the bar is read at: speedup = HTA time / tracekit ``stages`` time,
memory ratio = tracekit RSS / HTA RSS. ``x HTA`` is the ratio of the medians;
``rounds`` the median of each round's own ratio (HTA / ``stages`` of the same
round), which a machine that speeds up or slows down between rounds moves less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import bench_load
import make_big_trace

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "bench" / ".data"

HTA_DRIVER = """
import sys
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
analyzer.get_gpu_kernel_breakdown(visualize=False)
"""

TRACELENS_DRIVER = """
import sys
from TraceLens.Reporting import generate_perf_report_pytorch
generate_perf_report_pytorch(sys.argv[1], output_xlsx_path=sys.argv[2])
"""


def trace_of(tiles: int) -> Path:
    """The benchmark trace of ``tiles`` replicas (built once into bench/.data)."""
    path = DATA / f"v100_x{tiles}.json"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        events = make_big_trace.read_trace(make_big_trace.DEFAULT_SRC)["traceEvents"]
        meta = sum(1 for e in events if e.get("ph") == "M")
        # Exactly `tiles` replicas: the builder adds them until it has this many events.
        make_big_trace.tile(
            make_big_trace.DEFAULT_SRC, path, min_events=meta + (tiles - 1) * (len(events) - meta) + 1, min_bytes=1
        )
    return path


def can_import(python: Path | None, module: str) -> str | None:
    """None when ``python`` can import ``module``, else why not."""
    if python is None:
        return "no --tracelens-python given (TraceLens installs from its git repository)"
    if not python.exists():
        return f"{python} does not exist"
    probe = bench_load.subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True)
    return None if probe.returncode == 0 else probe.stderr.strip().splitlines()[-1]


def measure(trace: Path, runs: int, hta_py: Path, tracelens_py: Path | None) -> dict:
    """Every tool on ``trace``, ``runs`` times, alternating; medians and ratios."""
    size_mb = trace.stat().st_size / 1e6
    tools: dict[str, list] = {"stages": [], "report": [], "hta": []}
    tracelens_note = can_import(tracelens_py, "TraceLens")
    if tracelens_note is None:
        tools["tracelens"] = []
    with tempfile.TemporaryDirectory(prefix="tracekit-first-") as tmp:
        hta_dir = Path(tmp) / "hta"
        hta_dir.mkdir()
        (hta_dir / trace.name).symlink_to(trace)
        for i in range(runs):
            for tool in tools:
                cache = Path(tmp) / f"cache-{tool}-{i}"  # empty: the first answer pays the parse
                os.environ["TRACEKIT_CACHE_DIR"] = str(cache)
                if tool == "stages":
                    cmd = [sys.executable, "-m", "tracekit", "stages", trace]
                elif tool == "report":
                    cmd = [sys.executable, "-m", "tracekit", "report", trace, "--json", Path(tmp) / "r.json", "-q"]
                elif tool == "hta":
                    cmd = [hta_py, "-c", HTA_DRIVER, hta_dir]
                else:
                    cmd = [tracelens_py, "-c", TRACELENS_DRIVER, trace, Path(tmp) / "tl.xlsx"]
                wall, rss, _ = bench_load.run_measured(cmd)
                tools[tool].append((wall, rss))
                print(f"  {trace.name} {tool} run {i + 1}/{runs}: {wall:.2f} s, {rss:.0f} MB", file=sys.stderr)
    out: dict = {"trace": str(trace), "size_mb": size_mb, "runs": runs, "tracelens_note": tracelens_note}
    for tool, results in tools.items():
        wall = statistics.median(r[0] for r in results)
        out[tool] = {
            "wall_s": wall,
            "rss_mb": statistics.median(r[1] for r in results),
            "mb_per_s": size_mb / wall,
            "runs_wall_s": [r[0] for r in results],
        }
    out["speedup_stages"] = out["hta"]["wall_s"] / out["stages"]["wall_s"]
    # Each round's own ratio (its tools ran minutes apart): drift between rounds cancels, where the
    # ratio of medians can pair a fast round's stages with a slow round's HTA.
    out["speedup_stages_rounds"] = [h[0] / s[0] for h, s in zip(tools["hta"], tools["stages"])]
    out["speedup_stages_round_median"] = statistics.median(out["speedup_stages_rounds"])
    out["speedup_report"] = out["hta"]["wall_s"] / out["report"]["wall_s"]
    out["memory_ratio"] = out["stages"]["rss_mb"] / out["hta"]["rss_mb"]
    return out


def table(results: list[dict], headline: int) -> str:
    """The curve as plain text, the headline size marked."""
    lines = [
        f"{'tiles':>6}{'MB':>8}{'stages s':>10}{'report s':>10}{'HTA s':>8}{'x HTA':>7}{'rounds':>7}{'MB/s':>7}"
        f"{'RSS MB':>8}{'HTA MB':>8}{'RSS/HTA':>8}"
    ]
    for r in results:
        mark = " <- headline" if r["tiles"] == headline else ""
        lines.append(
            f"{r['tiles']:>6}{r['size_mb']:>8.0f}{r['stages']['wall_s']:>10.2f}{r['report']['wall_s']:>10.2f}"
            f"{r['hta']['wall_s']:>8.2f}{r['speedup_stages']:>7.1f}{r['speedup_stages_round_median']:>7.1f}"
            f"{r['stages']['mb_per_s']:>7.0f}"
            f"{r['stages']['rss_mb']:>8.0f}{r['hta']['rss_mb']:>8.0f}{r['memory_ratio']:>8.2f}{mark}"
        )
    notes = {r["tracelens_note"] for r in results if r["tracelens_note"]}
    lines += [f"TraceLens skipped: {n}" for n in notes]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", default="1,3,9,27", help="sizes, in replicas of the source trace")
    parser.add_argument("--headline-tiles", type=int, default=22)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hta-python", type=Path, default=bench_load.DEFAULT_HTA_PYTHON)
    parser.add_argument("--tracelens-python", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    tiles = sorted({int(t) for t in args.tiles.split(",")} | {args.headline_tiles})
    bench_load.require_tracekit()
    hta_py = bench_load.hta_python(args.hta_python)
    results = []
    for n in tiles:
        r = measure(trace_of(n), args.runs, hta_py, args.tracelens_python)
        r["tiles"] = n
        results.append(r)
    print(table(results, args.headline_tiles))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
