"""Attribution time of two commits on the same traces, alternating runs.

    python bench/bench_attribution.py BASE_REF [NEW_REF=HEAD] [--trace PATH ...] [--runs 3]

The attribution step (labels, module scopes, eager patterns, ops and kernel names
-> cpu_stages, gpu_op_stages, attention_calls) is timed alone: each run is a fresh
process that loads the trace into an empty database without linking, then builds
the linked model with the ref's ``assign.build`` wrapped in a timer (the nest
and link steps it needs run first, untimed). Each ref is checked out into a
temporary git worktree; runs alternate A, B, A, B, ... so drift on a shared machine
hits both. Prints every run, the medians and the ratio NEW / BASE per trace.
Default traces: the load benchmark's big trace (``bench/.data/big_trace.json``,
built by ``make_big_trace.py``) and the shared xDiT trace, the largest with module
scopes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ab_commits import worktrees

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACES = (
    REPO / "bench" / ".data" / "big_trace.json",
    REPO.parent / "shared" / "traces" / "tracelens" / "mi300_xdit_flux1_aiter-sage_t5-clip-eager.json.gz",
)

CHILD = r"""
import json, sys, time, tempfile, pathlib
sys.path.insert(0, sys.argv[1])
import duckdb, tracekit
try:  # the layered packages
    from tracekit.attribution import assign
    from tracekit.store import pipeline
except ImportError:  # refs before them: tracekit/attribution.py and tracekit/model.py
    from tracekit import attribution as assign, model as pipeline
db = pathlib.Path(tempfile.mkdtemp()) / "t.duckdb"
tracekit.load(sys.argv[2], output=db).close()
spent = {}
build = assign.build
def timed(con, temp=False):
    t0 = time.perf_counter()
    build(con, temp=temp)
    spent["attribution_s"] = time.perf_counter() - t0
assign.build = timed
con = duckdb.connect(str(db))
t0 = time.perf_counter()
pipeline.build(con)
spent["model_s"] = time.perf_counter() - t0
con.close()
print(json.dumps(spent))
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base")
    parser.add_argument("new", nargs="?", default="HEAD")
    parser.add_argument("--trace", action="append", type=Path, help="trace to time (repeatable)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    traces = [t.resolve() for t in args.trace] if args.trace else [t for t in DEFAULT_TRACES if t.exists()]
    if not traces:
        print("no trace: build bench/.data/big_trace.json with make_big_trace.py or pass --trace", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp, worktrees([args.base, args.new]) as trees:
        for trace in traces:
            results: dict[str, list[dict]] = {ref: [] for ref in trees}
            for i in range(args.runs):
                for ref, tree in trees.items():
                    out = (
                        subprocess.run(
                            [sys.executable, "-c", CHILD, str(tree), str(trace)],
                            check=True,
                            capture_output=True,
                            text=True,
                            cwd=tmp,
                        )
                        .stdout.strip()
                        .splitlines()[-1]
                    )
                    run = json.loads(out)
                    results[ref].append(run)
                    print(
                        f"{trace.name} run {i + 1} {ref}: attribution {run['attribution_s']:.2f} s, "
                        f"linked model {run['model_s']:.2f} s",
                        flush=True,
                    )
            med = {ref: statistics.median(r["attribution_s"] for r in runs) for ref, runs in results.items()}
            print(
                f"{trace.name}: median attribution {args.base} {med[args.base]:.2f} s, "
                f"{args.new} {med[args.new]:.2f} s, ratio {med[args.new] / med[args.base]:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
