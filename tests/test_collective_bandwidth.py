"""collective_bandwidth and slow_collectives against a hand computation from the raw JSON.

The shared NCCL trace (hta/a100_nccl_rank0: rank 0 of 2 on an A100, 15 all-reduces and 6 broadcasts) is
read here with json alone: each NCCL kernel's args (Collective name, In/Out msg nelems, dtype, Group size)
and its duration, and the nccl-tests formulas (PERFORMANCE.md) written out again: algbw = bytes / time,
busbw = algbw * 2(n-1)/n for an all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for a
broadcast or reduce.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal

import pytest

NCCL = "hta/a100_nccl_rank0.json.gz"
BYTES = {"Float": 4, "Long": 8, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Byte": 1}


def _factor(collective: str, n: int) -> float:
    name = collective.replace("_", "").lower()
    if "allreduce" in name:
        return 2 * (n - 1) / n
    if any(k in name for k in ("allgather", "reducescatter", "alltoall")):
        return (n - 1) / n
    assert name in ("broadcast", "reduce"), name
    return 1.0


def _by_hand(doc: dict, ops_args: bool = False) -> dict:
    """{(collective, size_bytes): (calls, time_ns, algbw, busbw)} from the NCCL kernels of ``doc``; with
    ``ops_args`` the sizes come from the record_param_comms op of the kernel's External id."""
    ops = {
        e["args"]["External id"]: e["args"]
        for e in doc["traceEvents"]
        if e.get("name") == "record_param_comms" and e.get("cat") == "cpu_op"
    }
    rows = defaultdict(lambda: [0, 0, 0])
    for e in doc["traceEvents"]:
        if e.get("cat") != "kernel" or not e["name"].startswith("nccl"):
            continue
        args = ops[e["args"]["External id"]] if ops_args else e["args"]
        n = args["Group size"]
        size = max(args["In msg nelems"], args["Out msg nelems"]) * BYTES[args["dtype"]]
        row = rows[(args["Collective name"], size)]
        row[0] += 1
        row[1] += int(Decimal(str(e["dur"])) * 1000)  # the trace's microseconds, exact in ns
        row[2] = n
    out = {}
    for (collective, size), (calls, time_ns, n) in rows.items():
        algbw = size * calls / time_ns  # bytes per ns = GB/s
        out[(collective, size)] = (calls, time_ns, algbw, algbw * _factor(collective, n))
    return out


def _check(got: list[dict], want: dict) -> None:
    assert {(r["collective"], r["size_bytes"]) for r in got} == set(want)
    for r in got:
        calls, time_ns, algbw, busbw = want[(r["collective"], r["size_bytes"])]
        assert (r["calls"], r["time_ns"]) == (calls, time_ns)
        assert r["algbw_gbps"] == pytest.approx(algbw, abs=5e-4)
        assert r["busbw_gbps"] == pytest.approx(busbw, abs=5e-4)


def test_bandwidth_matches_a_hand_computation_on_the_nccl_trace(shared_dir, load_shared):
    doc = json.loads(gzip.decompress((shared_dir / NCCL).read_bytes()))
    want = _by_hand(doc)
    rows = load_shared(NCCL).query("collective_bandwidth").to_dicts()
    assert [list(r) for r in rows[:1]] == [
        ["trace", "rank", "collective", "size_bytes", "calls", "time_ns", "algbw_gbps", "busbw_gbps"]
    ]
    assert {r["rank"] for r in rows} == {0} and len(rows) == 7 and sum(r["calls"] for r in rows) == 21
    _check(rows, want)
    # The largest all-reduce: 7,875,584 floats = 31,502,336 bytes, three calls.
    big = next(r for r in rows if r["size_bytes"] == 7_875_584 * 4)
    assert (big["collective"], big["calls"]) == ("allreduce", 3)


def test_slow_collectives_against_the_link_peak_and_the_size_bucket(load_shared):
    rows = load_shared(NCCL).query("slow_collectives").to_dicts()
    bw = {(r["collective"], r["size_bytes"]): r for r in load_shared(NCCL).query("collective_bandwidth").to_dicts()}
    # NVIDIA A100-PG509-200: an A100 SXM, NVLink 3 at 300 GB/s per direction. The all-reduces of 16 MiB and
    # more (26.3, 26.5 and 31.5 MB) reach 7 to 11 GB/s, under half of half the peak: all three fire; the
    # smaller ones are judged by their bucket's best alone, which each one is.
    assert sorted(r["size_bytes"] for r in rows) == sorted(s for (c, s) in bw if c == "allreduce" and s >= 16 * 2**20)
    for r in rows:
        assert (r["device"], r["link"], r["peak_gbps"], r["expected_gbps"]) == ("A100 SXM", "NVLink 3", 300, 150)
        assert r["busbw_gbps"] == bw[(r["collective"], r["size_bytes"])]["busbw_gbps"]
        assert r["bucket_bytes"] == 2**24 and r["lost_ns"] == round(r["time_ns"] * (1 - r["busbw_gbps"] / 150))
    # Against the bucket alone (no peak floor), nothing is under half its size's best.
    assert load_shared(NCCL).query("slow_collectives", large_bytes=2**62).to_dicts() == []


def test_the_finding_fires_on_slow_collectives_and_not_on_a_trace_without_any(load_shared):
    """The report's finding (findings.collective_bandwidth_low) is slow_collectives' rows: on the NCCL trace its
    three large all-reduces, their summed loss in the message; on a one-GPU trace with no collective, silent."""
    from tracekit.analysis import findings

    trace = load_shared(NCCL)
    slow = trace.query("slow_collectives").to_dicts()
    (hit,) = [f for f in findings.run(trace) if f.query == "findings.collective_bandwidth_low"]
    lost = sum(r["lost_ns"] for r in slow)
    assert len(slow) == 3 and f"{len(slow)} collective size(s)" in hit.message
    assert f"{lost / 1e6:,.3f} ms lost" in hit.message and "allreduce" in hit.message
    quiet = load_shared("tracelens/h100_bert-small_sdpa-flash.json.gz")
    assert not [f for f in findings.run(quiet) if f.query == "findings.collective_bandwidth_low"]


@pytest.mark.slow
def test_bus_factors_and_sizes_from_the_launching_op(shared_dir, inputs):
    """The NCCL trace rewritten by construction: groups of 4, the broadcasts turned into all-gathers whose
    output is four times their input, and the kernels stripped of their size args, so the sizes come from
    the record_param_comms op of the same External id."""
    doc = json.loads(gzip.decompress((shared_dir / NCCL).read_bytes()))
    for e in doc["traceEvents"]:
        args = e.get("args") or {}
        if "Collective name" not in args:
            continue
        args["Group size"], args["Process Group Ranks"] = 4, "[0, 1, 2, 3]"
        if args["Collective name"] == "broadcast":
            args["Collective name"] = "allgather"
            args["Out msg nelems"] = 4 * args["In msg nelems"]
        if e.get("cat") == "kernel":
            for key in ("In msg nelems", "Out msg nelems", "dtype"):
                args.pop(key, None)
    want = _by_hand(doc, ops_args=True)
    assert {c for c, _ in want} == {"allreduce", "allgather"}
    trace = inputs.trace(inputs.file(json.dumps(doc), "nccl_groups_of_4.json.gz"))
    _check(trace.query("collective_bandwidth").to_dicts(), want)
