"""Compare tracekit's multi-rank figures with HTA 0.5's comm/comp overlap and straggler analysis.

    python bench/compare_hta_ranks.py [--hta-python PATH] [--json OUT]

The set (``HTA_JOB`` in tests/cluster_synthetic.py, written to ``bench/.data/hta_ranks/``): four ranks
made from the real NCCL trace ``hta/a100_nccl_rank0`` (3 profiler steps, 21 collectives), each late at
chosen collectives by a chosen delay, one with extra computation inside a collective, so that the
stragglers, every collective's lateness and every rank's overlap are known by construction. A second
copy has rank 0's clock 2 ms ahead (``--skew-ms``), which moves no kernel on the GPU.

HTA runs in its own virtualenv (``holistictraceanalysis==0.5.0``: the default is
``bench/.venv-hta/bin/python``, as bench_load.py makes it) twice per set: as it loads by default
(the last profiler step dropped, times rounded to whole microseconds) and with
``include_last_profiler_step=True`` and ``HTA_DISABLE_NS_ROUNDING=1`` (exact, every step), to
separate those two differences from the definitions'. It answers ``get_comm_comp_overlap``,
``get_potential_stragglers`` (``num_candidates`` 1 and 2) and the kernels its straggler metric samples
(the last long communication kernel of each rank and iteration). tracekit answers ``comm_overlap``,
``rank_summary``, ``stragglers`` and ``matched_collectives``. The tables print each figure beside the
truth, the difference and its reason (docs/cluster.md, "Against HTA"). Not part of ``make test``: it
needs HTA; tests/test_cluster.py checks tracekit against the truth without it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "bench" / ".data" / "hta_ranks"
SOURCE = REPO.parent / "shared" / "traces" / "hta" / "a100_nccl_rank0.json.gz"

HTA_SCRIPT = r"""
import json, logging, sys, warnings
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
import pandas as pd
from hta.trace_analysis import TraceAnalysis
from hta.analyzers.straggler import _compute_normalized_start_time_of_significant_comm_kernels as metric_of
from hta.analyzers.straggler import _get_top_k_stragglers_with_metric as top_k
folder, last = sys.argv[1], sys.argv[2] == "1"
t = TraceAnalysis(trace_dir=folder, include_last_profiler_step=last)
overlap = t.get_comm_comp_overlap(visualize=False)
steps = t.get_profiler_steps()
ranks = list(t.t.get_all_traces())
# What get_potential_stragglers computes inside, kept: the kernel its metric samples per rank and iteration.
df = pd.concat([t.t.get_trace(r) for r in ranks], axis=0, keys=ranks, names=["rank", "idx"]).reset_index()
df = df.loc[df["iteration"].isin(steps)]
sampled, name = metric_of(df, t.t.symbol_table)
mean_iter = ((df["ts"] + df["dur"]).max() - df["ts"].min()) / df["iteration"].nunique()
print(json.dumps({
    "overlap_pct": {int(r): float(v) for r, v in zip(overlap["rank"], overlap["comp_comm_overlap_pctg"])},
    "steps": [int(s) for s in steps],
    "min_dur_us": float(mean_iter * 0.01),
    "stragglers": {k: [int(r) for r in t.get_potential_stragglers(num_candidates=k)] for k in (1, 2)},
    "flagged": {k: {int(r): int(c) for r, c in top_k(sampled, name, n_stragglers=k).items()} for k in (1, 2)},
    "sampled": [{"rank": int(s.rank), "iteration": int(s.iteration), "ts_us": float(s.ts) + float(t.t.min_ts),
                 "dur_us": float(s.dur)} for s in sampled.itertuples()],
}))
"""


def make_sets(skew_ms: float):
    """The aligned set and its copy with rank 0's clock ahead (rebuilt each run), with their truth."""
    sys.path.insert(0, str(REPO / "tests"))
    from cluster_synthetic import HTA_JOB, make_job

    sets = {}
    for name, offsets in (("aligned", {}), ("skewed", {0: round(skew_ms * 1e6)})):
        folder = DATA / name
        for old in folder.glob("*"):  # a few seconds, and never stale
            old.unlink()
        sets[name] = (folder, make_job(SOURCE, folder, offsets_ns=offsets, **HTA_JOB))
    return sets


def hta(python: str, folder: Path, all_steps: bool, exact: bool) -> dict:
    """HTA's answers on ``folder``: with the last profiler step or not, times exact or rounded to whole us."""
    env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="1" if exact else "0")
    out = subprocess.run(
        [python, "-c", HTA_SCRIPT, str(folder), "1" if all_steps else "0"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        raise SystemExit(f"HTA failed on {folder}: {(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    got = json.loads(lines[-1])
    got["flagged"] = {int(k): {int(r): c for r, c in v.items()} for k, v in got["flagged"].items()}
    got["stragglers"] = {int(k): v for k, v in got["stragglers"].items()}
    got["overlap_pct"] = {int(r): v for r, v in got["overlap_pct"].items()}
    return got


def ours(folder: Path) -> dict:
    import tracekit

    with tracekit.load(folder) as t:
        return {
            "overlap": {r["rank"]: r for r in t.query("comm_overlap").to_dicts()},
            "summary": t.query("rank_summary").to_dicts(),
            "stragglers": t.query("stragglers").to_dicts(),
            "matched": t.query("matched_collectives").to_dicts(),
            "offsets": dict(t.rows("SELECT rank, clock_offset_ns FROM traces")),
        }


def labels(truth) -> list[str]:
    """'allreduce 3' for each collective index (tracekit's instance: the order among its kind)."""
    seen: dict[str, int] = {}
    out = []
    for kind in truth.collectives:
        out.append(f"{kind} {seen.get(kind, 0)}")
        seen[kind] = seen.get(kind, 0) + 1
    return out


def step_of(index: int) -> int:
    return 4 + index // 7  # 7 collectives per ProfilerStep#4, #5, #6 in this source


def overlap_table(truth, mine: dict, default: dict, steps: dict, exact: dict) -> list[dict]:
    print("\nComm/comp overlap per rank, % of merged communication time (HTA prints 2 decimals)")
    print(
        f"{'rank':>4} {'truth':>8} {'tracekit':>9} {'HTA':>6} {'diff':>6} = {'step':>6} + {'round':>6} + {'rest':>6}"
        f"  {'comm ms':>8} {'exposed':>8}  what the rank does"
    )
    summary = {r["rank"]: r for r in mine["summary"]}
    doing = {r: [] for r in truth.ranks}
    for rank, at in truth.late_at.items():
        doing[rank].append(f"late {len(at)}x ({', '.join(f'{d / 1000:.0f} us' for d in at.values())})")
    for rank, ns in truth.extra_compute_ns.items():
        doing[rank].append(f"+{ns / 1000:.1f} us computation in a collective")
    rows = []
    for rank in truth.ranks:
        pct = 100 * truth.overlapped_ns[rank] / truth.comm_ns[rank]
        tk = mine["overlap"][rank]["overlap_pct"]
        row = {"rank": rank, "truth": pct, "tracekit": tk, "hta": default["overlap_pct"][rank]}
        row["hta_all_steps"], row["hta_exact"] = steps["overlap_pct"][rank], exact["overlap_pct"][rank]
        rows.append(row)
        s = summary[rank]
        # tracekit - HTA = what HTA's last step left out + what its rounding to whole us did + the rest
        step, rounding = row["hta_all_steps"] - row["hta"], row["hta_exact"] - row["hta_all_steps"]
        print(
            f"{rank:>4} {pct:8.3f} {tk:9.3f} {row['hta']:6.2f} {tk - row['hta']:6.2f} = {step:6.2f} + "
            f"{rounding:6.2f} + {tk - row['hta_exact']:6.2f}  {s['comm_ns'] / 1e6:8.3f} "
            f"{s['exposed_comm_ns'] / 1e6:8.3f}  {'; '.join(doing[rank]) or 'on time'}"
        )
    return rows


def straggler_table(name: str, truth, mine: dict, default: dict, exact: dict) -> dict:
    order = [(r["rank"], r["wait_caused_ns"]) for r in mine["stragglers"]]
    expected = sorted(truth.ranks, key=lambda r: (-truth.wait_caused_by[r], r))
    print(f"\nStragglers, {name} clocks (tracekit clock offsets found: {mine['offsets']})")
    print(f"  truth (wait caused, us):    {', '.join(f'{r}: {truth.wait_caused_by[r] / 1000:.0f}' for r in expected)}")
    print(f"  tracekit stragglers:        {', '.join(f'{r}: {w / 1000:.0f}' for r, w in order)}")
    print(f"  tracekit rank_summary:      {', '.join(str(r['rank']) for r in mine['summary'])} (worst first)")
    for label, got in (("HTA", default), ("HTA exact, all steps", exact)):
        counts = {k: ", ".join(f"{r}: {c}" for r, c in sorted(v.items())) for k, v in got["flagged"].items()}
        print(
            f"  {label + ':':27} num_candidates=1 -> {got['stragglers'][1]} (iterations flagged {counts[1]}); "
            f"=2 -> {got['stragglers'][2]} ({counts[2]})"
        )
    return {"truth": expected, "tracekit": order, "hta": default["stragglers"], "hta_exact": exact["stragglers"]}


def lateness_table(truth, mine: dict, default: dict) -> list[dict]:
    label = labels(truth)
    late = {i: (r, d) for r, at in truth.late_at.items() for i, d in at.items()}
    rows = {(m["collective"], m["instance"], m["rank"]): m for m in mine["matched"]}
    print("\nPer-collective lateness: every collective a rank was late at, and every kernel HTA's metric sampled")
    print(
        f"{'collective':>13} {'step':>4} {'truth':>14} {'tracekit':>20} {'HTA sampled (rank: start - earliest, us)':>44}"
    )
    raw: dict[int, list] = {}  # rank -> [(start on its own clock, ns; index)]: which collective HTA sampled
    wrong = 0
    for i, lab in enumerate(label):
        kind, inst = lab.split()
        for rank in truth.ranks:
            m = rows[(kind, int(inst), rank)]
            raw.setdefault(rank, []).append((m["start_ns"] + mine["offsets"][rank], i))
            wrong += m["arrival_ns"] != (late[i][1] if late.get(i, (None,))[0] == rank else 0)
    sampled: dict[int, dict[int, float]] = {}
    for s in default["sampled"]:
        start, index = min(raw[s["rank"]], key=lambda p: abs(p[0] - s["ts_us"] * 1000))
        sampled.setdefault(index, {})[s["rank"]] = s["ts_us"]
    by_step = {}
    for index, starts in sampled.items():
        by_step.setdefault(step_of(index), []).extend(starts.values())
    out = []
    for i in sorted(set(late) | set(sampled)):
        kind, inst = label[i].split()
        members = [rows[(kind, int(inst), r)] for r in truth.ranks]
        last = next((m for m in members if m["last_arrival"]), None)  # none when all arrived together
        t_rank, t_delay = late.get(i, (None, 0))
        tk = f"{last['rank']} +{last['arrival_ns'] / 1000:.1f}" if last else "none"
        hta_text = ""
        if i in sampled:
            earliest = min(by_step[step_of(i)])
            hta_text = ", ".join(f"{r}: {v - earliest:+.0f}" for r, v in sorted(sampled[i].items()))
        truth_text = f"{t_rank} +{t_delay / 1000:.1f}" if t_rank is not None else "none"
        print(f"{label[i]:>13} {step_of(i):>4} {truth_text:>14} {tk:>20} {hta_text:>44}")
        out.append(
            {
                "collective": label[i],
                "truth": [t_rank, t_delay],
                "tracekit": last and [last["rank"], last["arrival_ns"]],
            }
        )
        out[-1]["hta"] = {r: v - min(by_step[step_of(i)]) for r, v in sampled.get(i, {}).items()}
    cells = len(label) * len(truth.ranks)
    print(f"  tracekit's arrival_ns against the truth: {cells - wrong} of {cells} (collective, rank) equal")
    print(f"  HTA's duration threshold (1% of its mean iteration): {default['min_dur_us']:.0f} us")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default=str(REPO / "bench" / ".venv-hta" / "bin" / "python"))
    ap.add_argument("--skew-ms", type=float, default=2.0, help="rank 0's clock offset in the second set")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    result = {}
    for name, (folder, truth) in make_sets(args.skew_ms).items():
        default, exact = hta(args.hta_python, folder, False, False), hta(args.hta_python, folder, True, True)
        mine = ours(folder)
        print(f"\n== {name} clocks: {folder.relative_to(REPO)} (HTA steps {default['steps']}, exact {exact['steps']})")
        result[name] = {"stragglers": straggler_table(name, truth, mine, default, exact)}
        if name == "aligned":  # a clock offset moves no kernel on its GPU: the overlap is the aligned set's
            steps = hta(args.hta_python, folder, True, False)
            result[name]["overlap"] = overlap_table(truth, mine, default, steps, exact)
        result[name]["lateness"] = lateness_table(truth, mine, default)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
