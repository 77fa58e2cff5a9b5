"""Compare two commits' load and first-answer times on one trace, alternating runs.

    python bench/ab_commits.py TRACE BASE_REF [NEW_REF=HEAD] [--runs 3]

For refactors that must not be slower: each ref is checked out into a temporary
git worktree, and each run is a fresh process (``python -c``, the ref's code first
on sys.path) that times, on an empty cache, ``tracekit.load(TRACE, output=db)``
and then the first query that needs the linked model (``stage_breakdown``: link +
attribution + answer). Runs alternate A, B, A, B, ... so drift on a shared machine
hits both; the script prints every run, the medians and the ratio NEW / BASE.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time, tempfile, pathlib
sys.path.insert(0, sys.argv[1])
import tracekit
db = pathlib.Path(tempfile.mkdtemp()) / "t.duckdb"
t0 = time.perf_counter()
trace = tracekit.load(sys.argv[2], output=db)
t1 = time.perf_counter()
trace.query_arrow("stage_breakdown")
t2 = time.perf_counter()
trace.close()
print(json.dumps({"load_s": t1 - t0, "first_answer_s": t2 - t1, "total_s": t2 - t0}))
"""


@contextlib.contextmanager
def worktrees(refs: list[str]) -> Iterator[dict[str, Path]]:
    """Each ref checked out (detached) into a temporary git worktree, removed on exit."""
    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, Path] = {}
        try:
            for ref in refs:
                path = Path(tmp) / ref.replace("/", "_")
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), ref],
                    check=True,
                    capture_output=True,
                )
                trees[ref] = path
            yield trees
        finally:
            for tree in trees.values():
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True
                )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("base")
    parser.add_argument("new", nargs="?", default="HEAD")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[str, list[dict]] = {ref: [] for ref in (args.base, args.new)}
    with worktrees([args.base, args.new]) as trees:
        for i in range(args.runs):
            for ref, tree in trees.items():
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(tree), args.trace], check=True, capture_output=True, text=True
                ).stdout
                results[ref].append(json.loads(out.strip().splitlines()[-1]))
                print(f"run {i + 1} {ref}: " + ", ".join(f"{k} {v:.2f}" for k, v in results[ref][-1].items()))
    for key in ("load_s", "first_answer_s", "total_s"):
        base = statistics.median(r[key] for r in results[args.base])
        new = statistics.median(r[key] for r in results[args.new])
        print(f"{key:15s} median {args.base}: {base:.2f} s  {args.new}: {new:.2f} s  ratio {new / base:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
