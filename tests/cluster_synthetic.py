"""Multi-rank jobs built from one real rank, with stragglers and clock skew known by construction.

``make_job`` copies a real single-rank trace (``hta/a100_nccl_rank0``: 15
all-reduces and 6 broadcasts on NCCL) once per rank and rewrites it the way the
other ranks of the job would have written it:

- the rank fields (``distributedInfo``, the capture module's ``tracekit_capture``
  block, the collectives' ``Process Group Ranks`` / ``Group size``);
- each rank's clock: every timestamp moves by the rank's offset (hosts' clocks
  differ), so raw start times do not compare across ranks;
- a late rank: on it, every collective kernel starts ``delay`` later and is
  ``delay`` shorter (it arrived last and did not wait), while the others' kernels
  are unchanged (they arrived on time and waited), so every rank still ends the
  collective at the same moment, as NCCL does. ``delay`` is capped at half the
  kernel's duration.

``Truth`` holds what the cross-rank queries must find, computed here from what
was written, never by tracekit.

With ``p2p`` the same kernels become pipeline-parallel point-to-point transfers
between the pairs of ranks (0, 1), (2, 3), ...: every collective kernel is
NCCL's ``ncclKernel_SendRecv``, the even rank sending and the odd one receiving.
``p2p="args"`` records what PyTorch's ``record_param_comms`` does for a send or
recv (``Collective name`` send/recv, ``Dst Rank``/``Src Rank``); ``p2p="bare"``
records no communication argument at all (no name, group, peer or ``Seq``), as
a trace whose only evidence is the kernel name. ``world_size`` writes a job
larger than the ranks written (ranks missing).

``late_at`` makes different ranks late at different collectives, each by its own
delay, and ``extra_compute`` adds a computation kernel inside a collective where
no other GPU op runs, so each rank's communication/computation overlap differs
by a known amount (``bench/compare_hta_ranks.py`` sets HTA on such a job).
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

_COLLECTIVE = re.compile(r"^nccl(Dev)?Kernel_")
SENDRECV = "ncclKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
# What PyTorch records about a communication op (record_param_comms, copied onto the kernel).
_COMM_ARGS = (
    "Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype", "In split size", "Out split size",
    "Process Group Name", "Process Group Description", "Process Group Ranks", "Global rank start",
    "Global rank stride", "Seq",
)  # fmt: skip


@dataclass
class Truth:
    """What the job's traces say, by construction."""

    ranks: list[int]
    late_rank: int | None
    offsets_ns: dict[int, int]
    collectives_per_rank: int = 0
    # wait caused by the late ranks: the sum of wait_caused_by
    wait_caused_ns: int = 0
    delays_ns: list[int] = field(default_factory=list)
    # the collective ("Collective name") of each collective kernel, in order of start on a rank
    collectives: list[str] = field(default_factory=list)
    # {rank: {collective index on the rank: delay}}: every delay applied (after the cap), the late rank's included
    late_at: dict[int, dict[int, int]] = field(default_factory=dict)
    # per rank: the time the others waited for it, (ranks - 1) * its delays (one peer for point-to-point)
    wait_caused_by: dict[int, int] = field(default_factory=dict)
    # per rank: the length of the computation kernel extra_compute added (it all overlaps communication)
    extra_compute_ns: dict[int, int] = field(default_factory=dict)
    # per rank: merged communication kernel time, and the part of it computation kernels overlap (HTA's
    # comm/comp overlap), from the intervals written
    comm_ns: dict[int, int] = field(default_factory=dict)
    overlapped_ns: dict[int, int] = field(default_factory=dict)


def _ns(us) -> int:
    return round(float(us) * 1000)


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def _written_ns(us) -> int:
    """Exactly the nanoseconds tracekit reads from ``us`` as json.dumps writes it (the shortest repr);
    ``_ns``'s float product can be 1 ns off at today's epoch timestamps."""
    return round(Decimal(repr(us)) * 1000)


def _span(ev: dict) -> tuple[int, int]:
    start = _written_ns(ev["ts"])
    return start, start + _written_ns(ev["dur"])


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _overlap(events: list[dict]) -> tuple[int, int]:
    """Merged communication kernel time and the part of it computation kernels cover, ns (one device)."""
    comm, comp = [], []
    for ev in events:
        if ev.get("cat") == "kernel":
            (comm if _COLLECTIVE.match(ev["name"]) else comp).append(_span(ev))
    comm, comp = _merged(comm), _merged(comp)
    covered, j = 0, 0
    for start, end in comm:
        while j < len(comp) and comp[j][1] <= start:
            j += 1
        k = j
        while k < len(comp) and comp[k][0] < end:
            covered += min(end, comp[k][1]) - max(start, comp[k][0])
            k += 1
    return sum(end - start for start, end in comm), covered


def _add_compute(events: list[dict], collective: dict) -> int:
    """Fill the longest stretch of ``collective`` where no other GPU op runs with a copy of the computation
    kernel that started last before it (its launch too, so not an orphan), on a stream of its own; its length, ns."""
    start, end = _span(collective)
    gpu = [ev for ev in events if ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and ev is not collective]
    busy = _merged([_span(ev) for ev in gpu])
    free, at = [], start
    for b_start, b_end in busy:
        if b_start >= end:
            break
        if b_start > at:
            free.append((at, b_start))
        at = max(at, b_end)
    if at < end:
        free.append((at, end))
    a, b = max(free, key=lambda s: s[1] - s[0])
    before = max(
        (ev for ev in gpu if ev["cat"] == "kernel" and not _COLLECTIVE.match(ev["name"]) and _span(ev)[0] < a),
        key=lambda ev: _span(ev)[0],
    )
    extra = json.loads(json.dumps(before))
    stream = max(ev["args"].get("stream", 0) for ev in gpu if ev["cat"] == "kernel") + 1
    extra["tid"] = extra["args"]["stream"] = stream
    extra["ts"], extra["dur"] = _us(a), _us(b - a)
    events.append(extra)
    return b - a


def make_job(
    source: Path,
    out_dir: Path,
    ranks: int = 4,
    offsets_ns: dict[int, int] | None = None,
    late_rank: int | None = 2,
    delay_ns: int = 1_000_000,
    job: str | None = "4242",
    modern: bool = False,
    drop_first: dict[int, int] | None = None,
    seq_on: str = "kernel",
    p2p: str | None = None,
    world_size: int | None = None,
    late_at: dict[int, dict[int, int]] | None = None,
    extra_compute: dict[int, int] | None = None,
) -> Truth:
    """Write ``ranks`` traces of one job into ``out_dir``; return the truth.

    ``modern`` renames the kernels the NCCL >= 2.19 way (``ncclDevKernel_*``)
    and numbers each collective with the per-group ``Seq`` that PyTorch >= 2.4
    records; ``drop_first`` removes that many leading collective kernels from
    the given ranks (their profiling window began later), which only a
    sequence number can match correctly. ``seq_on="op"`` writes Seq only on
    the launching ``record_param_comms`` op (same External id), not on the kernel.

    ``late_at`` ({rank: {collective index: delay}}, the index counting the
    rank's collective kernels from 0 in order of start) replaces ``late_rank``
    and ``delay_ns``: each rank is late by its own delay at its own
    collectives, one late rank per collective. ``extra_compute`` ({rank:
    collective index}) fills the longest stretch of that collective's kernel
    where no other GPU op runs with a computation kernel, so that the rank's
    overlap grows by exactly its length.
    """
    offsets_ns = offsets_ns or {}
    drop_first = drop_first or {}
    extra_compute = extra_compute or {}
    if late_at is None:
        late_at, late_everywhere = {}, late_rank
    else:
        late_everywhere = None
        seen = [i for at in late_at.values() for i in at]
        if len(seen) != len(set(seen)):
            raise ValueError("late_at: one late rank per collective (the others wait for it)")
    text = gzip.decompress(source.read_bytes())
    out_dir.mkdir(parents=True, exist_ok=True)
    truth = Truth(list(range(ranks)), late_everywhere, {r: offsets_ns.get(r, 0) for r in range(ranks)})
    group = str(list(range(ranks)))
    for rank in range(ranks):
        doc = json.loads(text)  # a fresh copy for this rank (parsing again is faster than a deepcopy)
        dist = doc.setdefault("distributedInfo", {})
        dist["rank"], dist["world_size"] = rank, world_size or ranks
        for pg in dist.get("pg_config", []):
            pg["ranks"], pg["pg_size"] = list(range(ranks)), ranks
        if job is not None:
            doc["tracekit_capture"] = {
                "rank": rank,
                "world_size": world_size or ranks,
                "local_rank": rank % 2,
                "host": f"node{rank // 2}",
                "job_id": job,
            }
        offset = truth.offsets_ns[rank]
        seq = 0
        # The kernels' sequence numbers by External id, for their record_param_comms ops.
        seq_of = {}
        found = []  # (start, collective) of each collective kernel, in file order
        for ev in doc["traceEvents"]:
            if ev.get("cat") == "kernel" and _COLLECTIVE.match(ev.get("name", "")):
                seq_of[(ev.get("args") or {}).get("External id")] = len(seq_of)
                found.append((float(ev["ts"]), ev["args"].get("Collective name", "?")))
        # late_at and extra_compute count the collectives in order of start (the file's order is not)
        by_start = sorted(range(len(found)), key=lambda i: found[i][0])
        index_of = {i: n for n, i in enumerate(by_start)}
        truth.collectives = [found[i][1] for i in by_start]
        kept = []
        dropped = 0
        delays = []
        collectives = {}  # index on the rank -> the kernel as written
        for ev in doc["traceEvents"]:
            args = ev.get("args") or {}
            if "Collective name" in args:
                args["Process Group Ranks"], args["Group size"] = group, ranks
                if p2p == "args":  # the even rank of each pair sends to the odd one
                    args["Collective name"] = "send" if rank % 2 == 0 else "recv"
                    args["Dst Rank" if rank % 2 == 0 else "Src Rank"] = rank ^ 1
                elif p2p == "bare":
                    for key in _COMM_ARGS:
                        args.pop(key, None)
                if modern and seq_on == "op" and ev.get("cat") == "cpu_op" and args.get("External id") in seq_of:
                    args["Seq"] = seq_of[args["External id"]]
            kernel = ev.get("cat") == "kernel" and _COLLECTIVE.match(ev.get("name", ""))
            if kernel:
                if p2p:
                    ev["name"] = SENDRECV
                if modern:
                    ev["name"] = _COLLECTIVE.sub("ncclDevKernel_", ev["name"])
                    if seq_on == "kernel":
                        args["Seq"] = seq
                    else:  # only the launching op says it; the kernel carries the rest
                        args.pop("Seq", None)
                index = index_of[seq]
                planned = delay_ns if rank == late_everywhere else late_at.get(rank, {}).get(index, 0)
                seq += 1
                if dropped < drop_first.get(rank, 0):
                    dropped += 1
                    continue
            if "ts" in ev:
                ts = _ns(ev["ts"]) + offset
                if kernel and planned:
                    dur = _ns(ev["dur"])
                    delay = min(planned, dur // 2)
                    ts += delay
                    ev["dur"] = _us(dur - delay)
                    delays.append(delay)
                    truth.late_at.setdefault(rank, {})[index] = delay
                ev["ts"] = _us(ts)
                if kernel:
                    collectives[index] = ev
            kept.append(ev)
        if rank in extra_compute:
            truth.extra_compute_ns[rank] = _add_compute(kept, collectives[extra_compute[rank]])
        doc["traceEvents"] = kept
        truth.comm_ns[rank], truth.overlapped_ns[rank] = _overlap(kept)
        # A collective's other ranks all wait for the late one; a transfer's one peer does.
        truth.wait_caused_by[rank] = (1 if p2p else ranks - 1) * sum(delays)
        if rank == late_everywhere:
            truth.delays_ns = delays
        if not drop_first.get(rank):
            truth.collectives_per_rank = seq
        path = out_dir / f"rank{rank}.json.gz"
        # The fastest compression: the tests read each file once or twice.
        path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1, mtime=0))
    truth.wait_caused_ns = sum(truth.wait_caused_by.values())
    return truth


# The job the golden files of the cluster queries read (tests/test_queries_meta.py).
GOLDEN_JOB = {"ranks": 4, "offsets_ns": {0: 0, 1: 5_000_000, 2: -20_000_000, 3: 1_234_567}, "late_rank": 2}

# The job set beside HTA (bench/compare_hta_ranks.py, tests/test_cluster.py, docs/cluster.md "Against HTA").
# Collectives in order of start: 0-6 run in ProfilerStep#4 (broadcasts 0, 1; all-reduces 2-6, which
# matched_collectives calls allreduce 0-4), 7-13 in #5 (allreduce 5-9), 14-20 in #6 (allreduce 10-14); the
# broadcasts last 30 us, the all-reduces 1.7-6 ms. Rank 0 is on time everywhere; rank 1 is 100 us late at
# every all-reduce of step 4; rank 2 1 ms late at allreduce 8, the kernel HTA's straggler metric samples in
# step 5; rank 3 0.6 ms late at allreduce 5, and computes through the longest idle stretch of allreduce 1.
HTA_JOB = {
    "ranks": 4,
    "late_at": {1: dict.fromkeys(range(2, 7), 100_000), 2: {12: 1_000_000}, 3: {9: 600_000}},
    "extra_compute": {3: 3},
}
