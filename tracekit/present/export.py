"""Exporting: one loaded trace back to Chrome JSON, with attention tracks for Perfetto.

``export_perfetto`` writes every original event of the trace, in file order,
rebuilt from the ``events`` table (exact ``ts``/``dur`` from the integer
nanoseconds, ``args`` as written; pid/tid/id as numbers when their text is an
integer, else as strings, so a 2021 trace's ``"tid": "25738"`` comes back as
the thread 25738 its flows already name; an event kept whole in ``extra`` is
written as it was), the file's top-level keys, and added tracks:

- per GPU stream with attention work, a thread ``stream N · attention stages``
  on the same pid (the device): one ``X`` slice per GPU op whose stage is not
  ``other``, named by the stage, spanning exactly the op (category
  ``tracekit_stage``). Per op rather than per run of ops: merged runs would
  paint the idle gaps between kernels as attention time, and clicking a slice
  shows the kernel it stands for;
- per device, a thread ``attention calls``: one ``X`` slice per attention
  call from its first GPU op's start to its last GPU op's end on that device,
  named ``attention:<impl>`` (category ``tracekit_call``). Calls whose GPU
  spans overlap (several streams) go to further threads ``attention calls 2``,
  ... since a viewer cannot nest partly overlapping slices on one thread. A
  call whose GPU ops were all launched before the trace began carries
  ``"orphan": true`` in its args: the queries count it only with
  ``include_orphans=true`` (stages and report say how many they leave out).

- with ``critical_path=(region, instance)``, per process the critical path
  crosses (docs/critical_path.md), a thread ``critical path``: one ``X`` slice
  per edge of the path that takes time, from the event where the edge starts
  to the one where it ends, named by the edge's kind (cpu, launch_delay,
  kernel, kernel_gap, ...; category ``tracekit_critical_path``), on the
  process of the event it ends at (a launch delay on the GPU). The path's
  edges follow each other in time, so a thread never holds overlapping ones.

Each added thread gets ``thread_name`` and ``thread_sort_index`` metadata
events: a stage thread shares its stream's sort index (viewers order equal
indexes by name, which puts it right after the stream), the call threads sit
above the streams. The output is streamed: DuckDB formats each event's JSON
text in batches, so memory stays flat whatever the trace's size.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from tracekit.common import outputs, sqlmodules
from tracekit.errors import TracekitError, first_line
from tracekit.library import queries
from tracekit.model.critical_path import longest_path

STAGE_CAT = "tracekit_stage"
CALL_CAT = "tracekit_call"
STAGES_SUFFIX = " · attention stages"
CALLS_THREAD = "attention calls"
PATH_CAT = "tracekit_critical_path"
PATH_THREAD = "critical path"

# Original events formatted per query: bounds memory (about 200 bytes of
# JSON per event) while keeping queries few.
BATCH_EVENTS = 262_144
# Numeric tids of added threads: far above stream numbers and OS thread ids,
# below 2**31 so every viewer reads them as plain integers.
STAGE_TID_BASE = 1_000_000_000
CALL_TID_BASE = 2_000_000_000
PATH_TID_BASE = 2_100_000_000
# zlib level 6 is within a few percent of 9 on trace JSON at a fraction of the time.
GZIP_LEVEL = 6

_INTEGER = re.compile(r"-?[0-9]+")


@dataclass
class ExportSummary:
    """What ``export_perfetto`` wrote."""

    path: Path
    trace: str
    events: int
    stage_events: int
    stage_tracks: int
    call_events: int
    call_tracks: int
    path_events: int = 0


def _microseconds(ns: int) -> str:
    """Integer nanoseconds as exact microseconds text with three decimals."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _id_json(text: str) -> str:
    """A pid/tid as JSON: a number when it is an integer literal, else a string."""
    return text if _INTEGER.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def region_instance(text: str) -> tuple[str, int]:
    """``REGION`` or ``REGION:N`` (``--critical-path``) as (region, instance); instance 0 by default."""
    region, colon, instance = text.rpartition(":")
    if not colon:
        return text, 0
    if not instance.isdigit():
        raise TracekitError(f"--critical-path {text!r}: want REGION or REGION:N (N a number from 0)")
    return region, int(instance)


def pick_trace(trace, label: str | None = None) -> tuple[int, str]:
    """(trace_id, label) of the trace labelled ``label``, or of the only trace when None."""
    rows = trace.con.execute("SELECT trace_id, trace FROM traces ORDER BY trace_id").fetchall()
    labels = ", ".join(r[1] for r in rows)
    if label is None:
        if len(rows) != 1:
            raise TracekitError(f"the source holds {len(rows)} traces ({labels}): choose one with --trace LABEL")
        return rows[0]
    for trace_id, name in rows:
        if name == label:
            return trace_id, name
    raise TracekitError(f"no trace labelled {label!r} (the source holds: {labels})")


def export_perfetto(
    trace,
    out,
    trace_id: int | None = None,
    label: str | None = None,
    inputs=(),
    critical_path: tuple[str, int] | None = None,
) -> ExportSummary:
    """Write one trace of ``trace`` to ``out`` as Chrome JSON with attention tracks added.

    ``trace_id`` or ``label`` (traces.trace) chooses the trace; by default the
    only one. ``critical_path=(region, instance)`` adds the critical path of
    that region instance as a thread per process. ``out`` is gzipped when its
    name ends in ``.gz`` and written atomically: on any error no file is left behind.
    """
    if trace_id is None:
        trace_id, label = pick_trace(trace, label)
    else:
        # fetchall, not fetchone: DuckDB refuses new work while a result is unfinished.
        rows = trace.con.execute("SELECT trace FROM traces WHERE trace_id = ?", [trace_id]).fetchall()
        if not rows:
            raise TracekitError(f"no trace with trace_id {trace_id}")
        label = rows[0][0]
    out = Path(out)
    # trace.con itself, not a cursor: stages re-attributed with use_rules live in its TEMP tables.
    con = trace.con
    try:
        plan = _plan(con, trace_id)
        if critical_path is not None:
            _plan_path(con, trace_id, plan, *critical_path)
        _write_atomic(out, lambda f: _write(con, trace_id, plan, f), inputs)
    except duckdb.Error as exc:
        raise TracekitError(f"exporting {label} failed: {first_line(exc)}") from None
    return ExportSummary(
        out,
        label,
        plan.events,
        plan.stage_events,
        len(plan.stage_tracks),
        len(plan.calls),
        plan.call_tracks,
        len(plan.path_lines),
    )


@dataclass
class _Plan:
    header: str
    events: int
    stage_tracks: list[dict]
    stage_events: int
    calls: list[dict]
    call_tracks: int
    metadata_lines: list[str]
    used: dict[str, set[str]]
    first_us: str
    path_lines: list[str] = field(default_factory=list)


def _plan(con, trace_id: int) -> _Plan:
    """The header, the added threads (tids, names, sort indexes) and the call slices."""
    [(metadata, events, first_ts)] = con.execute(
        "SELECT CAST(metadata AS VARCHAR), events, first_ts_ns FROM traces WHERE trace_id = ?", [trace_id]
    ).fetchall()
    header = (metadata or "{}").strip()
    header = '{"traceEvents":[\n' if header == "{}" else header[:-1].rstrip() + ', "traceEvents": [\n'
    used: dict[str, set[str]] = {}
    for pid, tid in con.execute("SELECT DISTINCT pid, tid FROM events WHERE trace_id = ?", [trace_id]).fetchall():
        used.setdefault(pid, set()).add(tid)
    tracks = _stage_tracks(con, trace_id, used)
    calls = _calls(con, trace_id)
    first_us = _microseconds(first_ts or 0)
    lines = [
        line for t in tracks for line in _thread_metadata(first_us, t["pid"], t["new_tid"], t["name"], t["sort_index"])
    ]
    call_lines, call_tracks = _call_threads(con, trace_id, calls, tracks, used, first_us)
    stage_events = sum(t["ops"] for t in tracks)
    return _Plan(header, events, tracks, stage_events, calls, call_tracks, lines + call_lines, used, first_us)


def _plan_path(con, trace_id: int, plan: _Plan, region: str, instance: int) -> None:
    """Add the critical path of ``region``'s ``instance`` to ``plan``: a thread per process it crosses
    and one slice per edge of the path that takes time (what critical_path answers, with the edges'
    ends read from the graph)."""
    label = con.execute("SELECT trace FROM traces WHERE trace_id = ?", [trace_id]).fetchall()[0][0]
    graph = queries.find("critical_path_graph")
    result = con.execute(graph.sql, graph.bind({"region": region, "instance": instance}))
    names = [d[0] for d in result.description]
    wanted = ("from_id", "from_end", "to_id", "to_end", "time_ns", "kind", "stage", "call_id", "name")
    rows = [
        tuple(r[names.index(c)] for c in wanted)
        for r in result.fetchall()
        if r[names.index("trace")] == label and r[names.index("kind")] != "launch_order"
    ]  # in edge order: the graph's rows are ordered by graph and edge
    if not rows:
        return
    path = longest_path([r[0] * 2 + r[1] for r in rows], [r[2] * 2 + r[3] for r in rows], [r[4] for r in rows])
    edges = [rows[i] for i in path or () if rows[i][4] > 0]
    ids = sorted({e[0] for e in edges} | {e[2] for e in edges})
    at = {
        i: (pid, ts, end)
        for i, pid, ts, end in con.execute(
            "SELECT id, pid, ts_ns, end_ns FROM events WHERE id = ANY(?)", [ids]
        ).fetchall()
    }
    tids: dict[str, str] = {}
    for from_id, from_end, to_id, to_end, time_ns, kind, stage, call_id, name in edges:
        start = at[from_id][2 if from_end else 1]
        end = at[to_id][2 if to_end else 1]
        pid = at[to_id][0]
        if pid not in tids:
            taken = plan.used.setdefault(pid, set())
            numeric = all(_INTEGER.fullmatch(t) for t in taken)
            tids[pid] = _free_tid(taken, PATH_TID_BASE) if numeric else _free_name(taken, PATH_THREAD)
            plan.metadata_lines += _thread_metadata(plan.first_us, pid, tids[pid], PATH_THREAD, None)
        args = {
            "kind": kind,
            "time_ns": time_ns,
            "stage": stage,
            "call_id": call_id,
            "event": name,
            "from_id": from_id,
            "to_id": to_id,
        }
        plan.path_lines.append(
            f',\n{{"ph":"X","cat":"{PATH_CAT}","name":{json.dumps(kind)},"pid":{_id_json(pid)},'
            f'"tid":{_id_json(tids[pid])},"ts":{_microseconds(start)},"dur":{_microseconds(max(end - start, 0))},'
            f'"args":{json.dumps(args, ensure_ascii=False)}}}'
        )


def _stage_tracks(con, trace_id: int, used: dict[str, set[str]]) -> list[dict]:
    """One added thread per GPU stream with attention work: its pid, the stream's tid, a free tid of
    its own (marked in ``used``), the stage ops it holds, its name and sort index."""
    streams = con.execute(
        sqlmodules.text("present/stage_streams"),
        [trace_id],
    ).fetchall()
    tracks = []
    for pid, tid, ops, name, sort_index in streams:
        if _INTEGER.fullmatch(tid):
            new_tid = _free_tid(used.setdefault(pid, set()), STAGE_TID_BASE + int(tid) if int(tid) >= 0 else None)
            name = name or f"stream {tid}"
        else:
            new_tid = _free_name(used.setdefault(pid, set()), f"{tid}{STAGES_SUFFIX}")
            name = name or tid
        tracks.append(
            {
                "pid": pid,
                "tid": tid,
                "new_tid": new_tid,
                "ops": ops,
                "name": f"{name}{STAGES_SUFFIX}",
                "sort_index": sort_index,
            }
        )
    return tracks


def _call_threads(
    con, trace_id: int, calls: list[dict], tracks: list[dict], used: dict[str, set[str]], first_us: str
) -> tuple[list[str], int]:
    """Threads for the call slices, one per lane of each process, sorted above its streams: their
    metadata lines and how many. Sets each call's ``new_tid``; the tids taken are marked in ``used``."""
    top = dict(
        con.execute("SELECT pid, min(sort_index) FROM threads WHERE trace_id = ? GROUP BY pid", [trace_id]).fetchall()
    )
    lines: list[str] = []
    call_tracks = 0
    for pid in sorted({c["pid"] for c in calls}):
        on_pid = [c for c in calls if c["pid"] == pid]
        numeric = all(_INTEGER.fullmatch(t) for c in on_pid for t in c["tids"])
        sorts = [t["sort_index"] for t in tracks if t["pid"] == pid and t["sort_index"] is not None]
        if top.get(pid) is not None:
            sorts.append(top[pid])
        lane_tids = []
        for lane in range(1 + max(c["lane"] for c in on_pid)):
            name = CALLS_THREAD if lane == 0 else f"{CALLS_THREAD} {lane + 1}"
            taken = used.setdefault(pid, set())
            tid = _free_tid(taken, CALL_TID_BASE + lane) if numeric else _free_name(taken, name)
            lane_tids.append(tid)
            lines += _thread_metadata(first_us, pid, tid, name, min(sorts) - 1 if sorts else None)
        for c in on_pid:
            c["new_tid"] = lane_tids[c["lane"]]
        call_tracks += len(lane_tids)
    return lines, call_tracks


def _thread_metadata(first_us: str, pid, tid, name: str, sort_index) -> list[str]:
    """The ``thread_name`` (and, given a sort index, ``thread_sort_index``) events of an added thread."""
    head = f'"ph":"M","ts":{first_us},"pid":{_id_json(pid)},"tid":{_id_json(tid)}'
    lines = [f'{{"name":"thread_name",{head},"args":{{"name":{json.dumps(name, ensure_ascii=False)}}}}}']
    if sort_index is not None:
        lines.append(f'{{"name":"thread_sort_index",{head},"args":{{"sort_index":{int(sort_index)}}}}}')
    return lines


def _free_tid(used: set[str], preferred: int | None) -> str:
    """A numeric tid not used on the process, ``preferred`` when free; marked used."""
    tid = preferred if preferred is not None and preferred < 2**31 else STAGE_TID_BASE
    while str(tid) in used:
        tid += 1
    used.add(str(tid))
    return str(tid)


def _free_name(used: set[str], name: str) -> str:
    """A string tid not used on the process, ``name`` when free; marked used."""
    tid, n = name, 1
    while tid in used:
        n += 1
        tid = f"{name} ({n})"
    used.add(tid)
    return tid


def _calls(con, trace_id: int) -> list[dict]:
    """Attention calls per device they ran on, with their GPU span and a lane without overlaps."""
    rows = con.execute(
        sqlmodules.text("present/call_spans"),
        [trace_id],
    )
    names = [d[0] for d in rows.description]
    calls = [dict(zip(names, r)) for r in rows.fetchall()]
    lane_end: dict[str, list[int]] = {}
    for call in calls:
        ends = lane_end.setdefault(call["pid"], [])
        lane = next((i for i, end in enumerate(ends) if end <= call["ts_ns"]), len(ends))
        if lane == len(ends):
            ends.append(call["end_ns"])
        else:
            ends[lane] = call["end_ns"]
        call["lane"] = lane
    return calls


def _call_line(call: dict) -> str:
    shape_keys = ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "causal", "dtype")
    args = {
        "call_id": call["call_id"],
        "impl": call["impl"],
        "op": call["op"],
        "call_source": call["call_source"],
        "gpu_ops": call["gpu_ops"],
        "gpu_ns": call["gpu_ns"],
        "attention_kernel_ns": call["attention_kernel_ns"],
        "cpu_ns": call["cpu_ns"],
        "flops": call["flops"],
        "shapes": {k: call[k] for k in shape_keys if call[k] is not None},
    }
    if call["orphan"]:  # its GPU ops were launched before the trace began: the queries leave it out by default
        args["orphan"] = True
    name = json.dumps(f"attention:{call['impl']}", ensure_ascii=False)
    return (
        f',\n{{"ph":"X","cat":"{CALL_CAT}","name":{name},"pid":{_id_json(call["pid"])},'
        f'"tid":{_id_json(call["new_tid"])},"ts":{_microseconds(call["ts_ns"])},"dur":{_microseconds(call["end_ns"] - call["ts_ns"])},'
        f'"args":{json.dumps(args, ensure_ascii=False)}}}'
    )


def _write_lines(f, table: pa.Table) -> None:
    """Write a one-column table of text lines, concatenated, straight from Arrow's buffers."""
    for chunk in table.column(0).chunks:
        if not len(chunk):
            continue
        if chunk.type not in (pa.string(), pa.large_string()):
            chunk = chunk.cast(pa.large_string())
        # No line is NULL, so the values lie back to back in the data buffer.
        width = pa.int32() if chunk.type == pa.string() else pa.int64()
        offsets = pa.Array.from_buffers(width, len(chunk) + 1, [None, chunk.buffers()[1]], offset=chunk.offset)
        f.write(memoryview(chunk.buffers()[2])[offsets[0].as_py() : offsets[-1].as_py()])


def _write(con, trace_id: int, plan: _Plan, f) -> None:
    f.write(plan.header.encode())
    for lo in range(0, plan.events, BATCH_EVENTS):
        params = {"trace_id": trace_id, "lo": lo, "hi": lo + BATCH_EVENTS}
        _write_lines(f, con.sql(sqlmodules.text("present/event_lines"), params=params).to_arrow_table())
    for line in plan.metadata_lines:
        f.write(f",\n{line}".encode())
    if plan.stage_tracks:
        tracks = pa.Table.from_pylist(
            [
                {"pid": t["pid"], "tid": t["tid"], "pid_json": _id_json(t["pid"]), "tid_json": _id_json(t["new_tid"])}
                for t in plan.stage_tracks
            ]
        )
        con.register("_tracekit_stage_tracks", tracks)
        try:
            reader = con.sql(
                sqlmodules.text("present/stage_lines", stage_cat=STAGE_CAT), params={"trace_id": trace_id}
            ).to_arrow_reader(BATCH_EVENTS)
            for batch in reader:
                _write_lines(f, pa.Table.from_batches([batch]))
        finally:
            con.unregister("_tracekit_stage_tracks")
    for c in plan.calls:
        f.write(_call_line(c).encode())
    for line in plan.path_lines:
        f.write(line.encode())
    f.write(b"\n]}\n")


def _write_atomic(out: Path, write, inputs=()) -> None:
    """Run ``write(binary_file)`` into a temporary file beside ``out``, then rename it to ``out``."""

    def put(raw) -> None:
        if out.name.endswith(".gz"):
            with gzip.GzipFile(filename=out.name[:-3], mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL) as gz:
                write(gz)
        else:
            write(raw)

    outputs.write(out, put, inputs)
