"""Ranks of a job: who each trace says it is, and one clock for all of them.

A trace's identity (rank, world size, local rank, job, host) is read from what
wrote it: Kineto's ``distributedInfo``, the ``tracekit_capture`` metadata the
capture module embeds, Kineto's top-level ``host_name``, and the capture
module's file names (``rank00003.HOST[.NAME].TIME-PID-N.json.gz``).

Each host has its own clock, so ranks' timestamps do not line up. A collective
kernel (an all-reduce, an all-gather, ...) finishes at about the same moment on
every rank of its group, however late each rank arrived at it, so the
difference between the ends of the same collective on two ranks is the
difference between their clocks. ``align_clocks`` takes the median of those
differences against the job's reference rank (the lowest), and through ranks
already aligned for ranks that share no group with it.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path

import duckdb

from tracekit.common import sqlmodules
from tracekit.ingest.sources import rank_from_name

# The key tracekit's capture module writes its metadata under (capture/session.py).
CAPTURE_KEY = "tracekit_capture"

# rank{rank:05d}.{host}[.{name}].{UTC time}-{pid}-{n}.json.gz (capture/cluster.py).
_CAPTURE_NAME = re.compile(
    r"^rank\d+\.([A-Za-z0-9_-]+)\.(?:[A-Za-z0-9_-]+\.)?\d{8}T\d{6}Z-\d+-\d+(?:\.pt\.trace)?\.json(?:\.gz)?$"
)

SOURCE_REFERENCE = "reference"
SOURCE_COLLECTIVES = "collective ends"


def _as_dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _as_int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_text(value) -> str | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) and value.strip() else None


def host_from_name(path: Path) -> str | None:
    """The host field of a capture-layout file name, if the name has that layout."""
    match = _CAPTURE_NAME.match(path.name)
    return match.group(1) if match else None


def identity(header: Mapping, path: Path) -> dict[str, object]:
    """rank, rank_source, world_size, local_rank, job and host of one trace (None where nothing tells)."""
    distributed = _as_dict(header.get("distributedInfo"))
    captured = _as_dict(header.get(CAPTURE_KEY))
    rank, source = None, None
    if _as_int(distributed.get("rank")) is not None:
        rank, source = distributed["rank"], "distributedInfo"
    elif _as_int(captured.get("rank")) is not None:
        rank, source = captured["rank"], CAPTURE_KEY
    elif (named := rank_from_name(path)) is not None:
        rank, source = named, "file name"
    return {
        "rank": rank,
        "rank_source": source,
        "world_size": _as_int(distributed.get("world_size"))
        if _as_int(distributed.get("world_size")) is not None
        else _as_int(captured.get("world_size")),
        "local_rank": _as_int(captured.get("local_rank")),
        "job": _as_text(captured.get("job_id")),
        "host": _as_text(captured.get("host")) or _as_text(header.get("host_name")) or host_from_name(path),
    }


def loaded_on() -> str:
    """host:pid of this process, for traces.loaded_on."""
    return f"{socket.gethostname() or 'unknown-host'}:{os.getpid()}"


def finish(con: duckdb.DuckDBPyConnection, warn: Callable[[str], None] | None = None) -> None:
    """After every trace is loaded: warn about duplicate ranks, then align the ranks' clocks."""
    if warn:
        for message in duplicate_ranks(con):
            warn(message)
    align_clocks(con)


def duplicate_ranks(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One message per rank of a job that more than one trace claims."""
    rows = con.execute(sqlmodules.text("ingest/duplicate_ranks")).fetchall()
    out = []
    for job, rank, traces in rows:
        where = f"job {job}" if job is not None else "the same world (no job id recorded; the same world_size)"
        out.append(
            f"{len(traces)} traces claim rank {rank} of {where}: {', '.join(traces)}; "
            "cross-rank queries will treat them as different ranks"
        )
    return out


def align_clocks(con: duckdb.DuckDBPyConnection) -> None:
    """Fill traces.clock_offset_ns and clock_source from the ends of matched collective kernels."""
    alone = con.execute("SELECT count(*) = count(DISTINCT coalesce(job, '')) FROM traces").fetchall()[0][0]
    if alone:
        # One trace per job is its job's reference: no need to find its collectives (a scan of every
        # kernel name).
        con.execute("UPDATE traces SET clock_offset_ns = 0, clock_source = ?", [SOURCE_REFERENCE])
        return
    sqlmodules.run(con, "ingest/clock_references", reference=SOURCE_REFERENCE)
    while True:
        ((added,),) = sqlmodules.fetch(con, "ingest/clock_round", source=SOURCE_COLLECTIVES)
        if not added:
            break
    sqlmodules.run(con, "ingest/clock_apply")
