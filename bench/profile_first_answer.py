"""Where a first answer's wall time goes, and how many cores each part keeps busy.

    python bench/profile_first_answer.py [--tiles 22 | --trace PATH] [--command stages] [--interval 0.05]
                                         [--min 0.1] [--runs 1]

Runs ``tracekit COMMAND TRACE`` in this process on an empty cache (a fresh
temporary ``TRACEKIT_CACHE_DIR`` per run) while a thread samples, every
``--interval`` seconds, the process's CPU time (``getrusage``: every
thread, DuckDB's and polars' included) and the main thread's two innermost
tracekit frames. It prints, per frame pair in order of first appearance, the
wall seconds sampled in it and the cores used there (CPU seconds / wall
seconds): on a 2-core machine a part at ~1 core leaves the other idle, which is
where running things side by side can still gain. It also prints the part's
system CPU seconds and minor page faults (thousands): memory touched for the
first time, which the kernel maps page by page (on x22 most of the sys time).
With ``--runs`` above 1 every column is a median over the runs (a part missing
from a run counts 0 there).

Sampling: a part shorter than the interval is seen only by chance, and each
sample is charged to the frame the main thread is in at its end. Unix only (``resource``).
It is a profile, not the benchmark: ``bench_first_answer.py`` times the
command as a user runs it (a fresh process each time, against HTA).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_first_answer  # noqa: E402


def _usage() -> tuple[float, float, int]:
    """(CPU s, system CPU s, minor page faults) of this process so far, every thread's."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_stime, r.ru_minflt


def _cpu_s() -> float:
    return _usage()[0]


def _where(frame, depth: int = 2) -> str:
    """The ``depth`` innermost frames of tracekit's own code on this stack, innermost first."""
    names = []
    while frame is not None and len(names) < depth:
        code = frame.f_code
        parts = Path(code.co_filename).parts
        if "tracekit" in parts and "bench" not in parts:
            names.append(f"{Path(code.co_filename).name}:{code.co_name}")
        frame = frame.f_back
    return " < ".join(names) or "(outside tracekit)"


def profile(trace: Path, command: str, interval: float) -> tuple[dict[str, list[float]], float, float]:
    """One run: {frame pair: [wall s, CPU s, system CPU s, minor faults]} in order of first
    appearance, total wall and CPU."""
    from tracekit import cli

    main = threading.get_ident()
    parts: dict[str, list[float]] = {}
    stop = threading.Event()

    def sample() -> None:
        last_t, last = time.perf_counter(), _usage()
        while not stop.wait(interval):
            t, now = time.perf_counter(), _usage()
            frame = sys._current_frames().get(main)
            part = parts.setdefault(_where(frame), [0.0, 0.0, 0.0, 0.0])
            part[0] += t - last_t
            for i in range(3):
                part[i + 1] += now[i] - last[i]
            last_t, last = t, now

    with tempfile.TemporaryDirectory(prefix="tracekit-profile-") as cache:
        os.environ["TRACEKIT_CACHE_DIR"] = cache
        sampler = threading.Thread(target=sample, daemon=True)
        t0, c0 = time.perf_counter(), _cpu_s()
        sampler.start()
        with open(os.devnull, "w") as devnull:
            stdout, sys.stdout = sys.stdout, devnull
            try:
                rc = cli.main([command, str(trace)])
            finally:
                sys.stdout = stdout
        stop.set()
        sampler.join()
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    if rc != 0:
        raise SystemExit(f"tracekit {command} {trace} exited {rc}")
    return parts, wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", type=int, default=22, help="the benchmark trace of this many replicas")
    parser.add_argument("--trace", type=Path, help="profile this trace instead")
    parser.add_argument("--command", default="stages", help="the tracekit command (default: stages)")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    parser.add_argument("--min", type=float, default=0.1, help="print parts of at least this many wall seconds")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    trace = args.trace or bench_first_answer.trace_of(args.tiles)
    runs = [profile(trace, args.command, args.interval) for _ in range(args.runs)]
    names = list(dict.fromkeys(n for parts, _, _ in runs for n in parts))
    wall = statistics.median(w for _, w, _ in runs)
    cpu = statistics.median(c for _, _, c in runs)
    print(f"tracekit {args.command} {trace.name}: {wall:.2f} s wall, {cpu:.2f} CPU s, {cpu / wall:.2f} cores")
    print(
        f"{'wall s':>7}{'CPU s':>7}{'cores':>7}{'sys s':>7}{'faults':>8}"
        "  where (the main thread's innermost tracekit frames; faults: minor page faults, thousands)"
    )
    rest = [0, 0.0, 0.0, 0.0, 0.0]  # the parts below --min: how many, their wall, CPU, sys s and faults
    for name in names:
        w, c, sy, fl = (statistics.median(parts.get(name, [0.0] * 4)[i] for parts, _, _ in runs) for i in range(4))
        if w >= args.min and w > 0:
            print(f"{w:7.2f}{c:7.2f}{c / w:7.2f}{sy:7.2f}{fl / 1000:8.1f}  {name}")
        else:
            rest = [rest[0] + 1, rest[1] + w, rest[2] + c, rest[3] + sy, rest[4] + fl]
    if rest[0]:
        print(
            f"{rest[1]:7.2f}{rest[2]:7.2f}{'':7}{rest[3]:7.2f}{rest[4] / 1000:8.1f}"
            f"  {rest[0]} parts below --min {args.min} (medians summed)"
        )


if __name__ == "__main__":
    main()
