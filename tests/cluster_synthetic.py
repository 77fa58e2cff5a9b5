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
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
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
    # wait caused by the late rank: sum over its collectives of (ranks - 1) * delay
    wait_caused_ns: int = 0
    delays_ns: list[int] = field(default_factory=list)


def _ns(us) -> int:
    return round(float(us) * 1000)


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


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
) -> Truth:
    """Write ``ranks`` traces of one job into ``out_dir``; return the truth.

    ``modern`` renames the kernels the NCCL >= 2.19 way (``ncclDevKernel_*``)
    and numbers each collective with the per-group ``Seq`` that PyTorch >= 2.4
    records; ``drop_first`` removes that many leading collective kernels from
    the given ranks (their profiling window began later), which only a
    sequence number can match correctly. ``seq_on="op"`` writes Seq only on
    the launching ``record_param_comms`` op (same External id), not on the kernel.
    """
    offsets_ns = offsets_ns or {}
    drop_first = drop_first or {}
    text = gzip.decompress(source.read_bytes())
    out_dir.mkdir(parents=True, exist_ok=True)
    truth = Truth(list(range(ranks)), late_rank, {r: offsets_ns.get(r, 0) for r in range(ranks)})
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
        for ev in doc["traceEvents"]:
            if ev.get("cat") == "kernel" and _COLLECTIVE.match(ev.get("name", "")):
                seq_of[(ev.get("args") or {}).get("External id")] = len(seq_of)
        kept = []
        dropped = 0
        delays = []
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
                seq += 1
                if dropped < drop_first.get(rank, 0):
                    dropped += 1
                    continue
            if "ts" in ev:
                ts = _ns(ev["ts"]) + offset
                if kernel and rank == late_rank:
                    dur = _ns(ev["dur"])
                    delay = min(delay_ns, dur // 2)
                    ts += delay
                    ev["dur"] = _us(dur - delay)
                    delays.append(delay)
                ev["ts"] = _us(ts)
            kept.append(ev)
        doc["traceEvents"] = kept
        if rank == late_rank:
            truth.delays_ns = delays
        if not drop_first.get(rank):
            truth.collectives_per_rank = seq
        path = out_dir / f"rank{rank}.json.gz"
        # The fastest compression: the tests read each file once or twice.
        path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1, mtime=0))
    # A collective's other ranks all wait for the late one; a transfer's one peer does.
    truth.wait_caused_ns = (1 if p2p else ranks - 1) * sum(truth.delays_ns)
    return truth


# The job the golden files of the cluster queries read (tests/test_queries_meta.py).
GOLDEN_JOB = {"ranks": 4, "offsets_ns": {0: 0, 1: 5_000_000, 2: -20_000_000, 3: 1_234_567}, "late_rank": 2}
