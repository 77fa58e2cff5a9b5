"""Compare tracekit's critical path with HTA 0.5's ``critical_path_analysis`` on the same traces.

    python bench/compare_hta_critical_path.py [--hta-python PATH] [TRACE[:REGION[:INSTANCE]] ...]

For each trace, HTA runs in its own virtualenv (``holistictraceanalysis==0.5.0``: the default is
``bench/.venv-hta/bin/python``, as bench_load.py makes it) and prints its path's length and its
edges' summed weight per type; tracekit answers ``critical_path`` with ``host_gaps=false`` (HTA
weighs the time between top-level calls 0). The table shows both lengths, their difference and the
edge kinds each found (HTA's edge types mapped to tracekit's kinds, docs/critical_path.md). Without
arguments: the shared traces that carry GPU work. Not part of ``make test``: it needs HTA.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "traces"
DEFAULT_TRACES = [
    f"{SHARED}/hta/a100_event_sync_multi_stream.json.gz::0",
    f"{SHARED}/hta/a100_triton_example.json.gz::0",
    f"{SHARED}/hta/v100_ns_resolution.json.gz:ProfilerStep:0",
    f"{SHARED}/hta/a100_nccl_rank0.json.gz:ProfilerStep:0",
    f"{SHARED}/tracelens/h100_bert-small_sdpa-flash.json.gz::0",
]

# HTA's edge types -> tracekit's kinds (kernel spans and CPU spans are both "operator" in HTA).
HTA_SCRIPT = r"""
import json, logging, sys, tempfile, shutil, os
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
path, region, instance = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = tempfile.mkdtemp()
os.symlink(os.path.abspath(path), os.path.join(d, "rank0." + os.path.basename(path)))
t = TraceAnalysis(trace_dir=d)
rank = next(iter(t.t.traces))
g, ok = t.critical_path_analysis(rank=rank, annotation=region, instance_id=instance)
df = t.t.get_trace(rank)
kinds = {}
for e in g.critical_path_edges_set:
    k = e.type.value.replace("critical_path_", "")
    if k == "operator":
        ev = g.get_event_attribution_for_edge(e)
        k = "kernel" if ev is not None and df.stream.loc[ev] >= 0 else "cpu"
    kinds[k] = kinds.get(k, 0) + int(g.edges[e.begin, e.end]["weight"])
print(json.dumps({"ok": bool(ok), "length": sum(kinds.values()), "kinds": kinds, "edges": len(g.critical_path_edges_set)}))
shutil.rmtree(d)
"""
HTA_KIND = {
    "cpu": "cpu",
    "kernel": "kernel",
    "kernel_launch_delay": "launch_delay",
    "kernel_kernel_delay": "kernel_gap",
    "sync_dependency": "sync",
    "dependency": "cpu_gap",
}


def hta(python: str, path: str, region: str, instance: int) -> dict:
    out = subprocess.run(
        [python, "-c", HTA_SCRIPT, path, region, str(instance)], capture_output=True, text=True, check=False
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        return {"error": (out.stderr.strip().splitlines() or ["no output"])[-1]}
    got = json.loads(lines[-1])
    # HTA's times are microseconds (integers after its parser rounds them); tracekit's are exact ns.
    got["kinds"] = {HTA_KIND.get(k, k): v * 1000 for k, v in got["kinds"].items()}
    got["length"] *= 1000
    return got


def ours(path: str, region: str, instance: int) -> dict:
    import tracekit

    trace = tracekit.load(path, cache=True)
    rows = trace.query("critical_path", region=region, instance=instance, host_gaps=False).pl()
    import polars as pl

    kinds = {k: int(v) for k, v in rows.group_by("kind").agg(pl.col("time_ns").sum()).iter_rows()}
    return {"length": int(rows["time_ns"].sum()), "kinds": kinds, "edges": rows.height}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default=str(REPO / "bench" / ".venv-hta" / "bin" / "python"))
    ap.add_argument("--json", help="write the rows here too")
    ap.add_argument("traces", nargs="*", default=DEFAULT_TRACES)
    args = ap.parse_args(argv)
    rows = []
    print(f"{'trace':44} {'region':>13} {'HTA us':>11} {'tracekit us':>11} {'diff us':>9}  kinds (HTA | tracekit)")
    for spec in args.traces:
        path, _, rest = spec.partition(":")
        region, _, inst = rest.partition(":")
        instance = int(inst or 0)
        theirs, mine = hta(args.hta_python, path, region, instance), ours(path, region, instance)
        row = {"trace": Path(path).name, "region": region, "instance": instance, "hta": theirs, "tracekit": mine}
        rows.append(row)
        if "error" in theirs:
            print(f"{Path(path).name:44} {region or '(trace)':>13} HTA failed: {theirs['error']}")
            continue
        diff = (mine["length"] - theirs["length"]) / 1000
        hk = ",".join(f"{k}={v / 1000:.0f}" for k, v in sorted(theirs["kinds"].items()))
        mk = ",".join(f"{k}={v / 1000:.0f}" for k, v in sorted(mine["kinds"].items()))
        print(
            f"{Path(path).name:44} {region or '(trace)':>13} {theirs['length'] / 1000:11.3f} "
            f"{mine['length'] / 1000:11.3f} {diff:9.3f}  {hk} | {mk}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
