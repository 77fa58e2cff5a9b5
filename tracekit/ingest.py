"""Building tables: staged events -> one DuckDB table per event phase.

Every event of every input file lands in exactly one of ``slices`` (``X``),
``instants`` (``i``/``I``/``R``), ``flows`` (``s``/``t``/``f``), ``counters``
(``C``), ``metadata_events`` (``M``) or ``other_events`` (anything else, or
no ``ph``). Each row keeps its position in the file (``ordinal``), its raw
``cat``, its ``args`` as JSON and, when the event has keys beyond the Chrome
trace format's usual ones, the whole event in ``extra``: nothing is dropped.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb

from . import reader
from .errors import NotATraceError, TraceFormatError
from .kinds import kind_sql
from .sources import Source, rank_from_name, trace_labels

# Event keys read into typed columns; any other key puts the event in `extra`.
EVENT_SPEC = {
    "ph": "VARCHAR",
    "cat": "VARCHAR",
    "name": "VARCHAR",
    "pid": "VARCHAR",
    "tid": "VARCHAR",
    # Exact decimal microseconds: a float64 loses nanoseconds at epoch scale.
    "ts": "DECIMAL(24,3)",
    "dur": "DECIMAL(24,3)",
    "id": "VARCHAR",
    "bp": "VARCHAR",
    "s": "VARCHAR",
    "args": "JSON",
}

# (key in args, column, type): the hot fields promoted to typed slice columns.
ARGS_FIELDS = [
    ("correlation", "correlation", "BIGINT"),
    ("External id", "external_id", "BIGINT"),
    ("device", "device", "INTEGER"),
    ("stream", "stream", "BIGINT"),
    ("grid", "grid", "INTEGER[]"),
    ("block", "block", "INTEGER[]"),
    ("registers per thread", "registers_per_thread", "INTEGER"),
    ("shared memory", "shared_memory_bytes", "BIGINT"),
    ("blocks per SM", "blocks_per_sm", "DOUBLE"),
    ("warps per SM", "warps_per_sm", "DOUBLE"),
    ("est. achieved occupancy %", "est_occupancy_pct", "DOUBLE"),
    ("bytes", "bytes", "BIGINT"),
    ("memory bandwidth (GB/s)", "memory_bandwidth_gbps", "DOUBLE"),
    ("Input Dims", "input_dims", "JSON"),
    ("Input type", "input_types", "JSON"),
    ("Input Strides", "input_strides", "JSON"),
    ("Concrete Inputs", "concrete_inputs", "JSON"),
    ("Sequence number", "sequence_number", "BIGINT"),
    ("Fwd thread id", "fwd_thread_id", "BIGINT"),
    ("Record function id", "record_function_id", "BIGINT"),
    ("Python id", "python_id", "BIGINT"),
    ("Python parent id", "python_parent_id", "BIGINT"),
    ("Collective name", "collective_name", "VARCHAR"),
    ("In msg nelems", "in_msg_nelems", "BIGINT"),
    ("Out msg nelems", "out_msg_nelems", "BIGINT"),
    ("Group size", "group_size", "INTEGER"),
    ("dtype", "collective_dtype", "VARCHAR"),
    ("In split size", "in_split_size", "VARCHAR"),
    ("Out split size", "out_split_size", "VARCHAR"),
    ("Process Group Name", "pg_name", "VARCHAR"),
    ("Process Group Description", "pg_desc", "VARCHAR"),
    ("Process Group Ranks", "pg_ranks", "VARCHAR"),
    ("cbid", "cbid", "INTEGER"),
]

# Bounds past which a value is corrupt, not merely unusual: ts must fit
# int64 nanoseconds; no profiler window lasts 11 days.
MAX_ABS_TS_US = 9_000_000_000_000_000
MAX_DUR_US = 1_000_000_000_000

BATCH_BYTES = 1 << 30
# The event's own "id" (flow ids) would clash with our row id.
_EV_COLUMN = {"id": "ev_id"}

_COMMON = "id BIGINT, trace_id INTEGER, ordinal BIGINT, kind VARCHAR, cat VARCHAR, name VARCHAR, pid VARCHAR, tid VARCHAR"
BASE_DDL = {
    "traces": """
        trace_id INTEGER, trace VARCHAR, path VARCHAR, form VARCHAR, file_bytes BIGINT,
        events_bytes BIGINT, events BIGINT, rank INTEGER, rank_source VARCHAR, world_size INTEGER,
        schema_version VARCHAR, trace_name VARCHAR, display_time_unit VARCHAR, base_time_ns BIGINT,
        first_ts_ns BIGINT, last_end_ns BIGINT, distributed_info JSON, metadata JSON""",
    "devices": """
        trace_id INTEGER, device INTEGER, name VARCHAR, compute_capability VARCHAR,
        total_global_mem_bytes BIGINT, num_sms INTEGER, warp_size INTEGER,
        max_threads_per_block INTEGER, max_threads_per_sm INTEGER, regs_per_block INTEGER,
        regs_per_sm INTEGER, shared_mem_per_block_bytes BIGINT, shared_mem_per_sm_bytes BIGINT,
        shared_mem_per_block_optin_bytes BIGINT, props JSON""",
    "slices": _COMMON
    + ", ts_ns BIGINT, dur_ns BIGINT, end_ns BIGINT, "
    + ", ".join(f"{col} {typ}" for _, col, typ in ARGS_FIELDS)
    + ", args JSON, extra JSON",
    "instants": _COMMON + ", ph VARCHAR, ts_ns BIGINT, scope VARCHAR, args JSON, extra JSON",
    "flows": _COMMON + ", ph VARCHAR, ts_ns BIGINT, flow_id VARCHAR, bp VARCHAR, args JSON, extra JSON",
    "counters": _COMMON + ", ts_ns BIGINT, args JSON, extra JSON",
    "metadata_events": _COMMON + ", ts_ns BIGINT, args JSON, extra JSON",
    "other_events": _COMMON
    + ", ph VARCHAR, ts_ns BIGINT, dur_ns BIGINT, flow_id VARCHAR, bp VARCHAR, scope VARCHAR, args JSON, extra JSON",
}
# Which phases go to which table; other_events takes the rest.
PHASE_TABLES = {
    "slices": ("X",),
    "instants": ("i", "I", "R"),
    "flows": ("s", "t", "f"),
    "counters": ("C",),
    "metadata_events": ("M",),
}
EVENT_TABLES = (*PHASE_TABLES, "other_events")

Progress = Callable[[int, int, str], None]


@dataclass
class _Staged:
    trace_id: int
    label: str
    staged: reader.StagedTrace
    file_bytes: int


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the empty base tables."""
    for name, cols in BASE_DDL.items():
        con.execute(f"CREATE TABLE {name} ({cols})")


def _struct_spec(fields: dict[str, str]) -> str:
    return json.dumps(fields).replace("'", "''")


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def ingest(
    con: duckdb.DuckDBPyConnection,
    sources: list[Source],
    progress: Progress | None = None,
    tmp_dir: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> int:
    """Load ``sources`` into the base tables of ``con``; return traces loaded.

    Files found by walking a directory that turn out not to be traces (a
    manifest beside the traces) are skipped with a warning; any other bad
    file raises ``TraceFormatError`` naming it.
    """
    total = sum(s.path.stat().st_size for s in sources)
    labels = trace_labels([s.path for s in sources])
    workdir = Path(tempfile.mkdtemp(prefix="tracekit-stage-", dir=tmp_dir))
    done = 0
    skipped: list[str] = []
    loaded = 0
    next_id = con.execute("SELECT coalesce(max(trace_id), 0) + 1 FROM traces").fetchone()[0]
    try:
        batch: list[_Staged] = []
        batch_bytes = 0
        for source, label in zip(sources, labels):
            if progress:
                progress(done, total, str(source.path))
            try:
                st = reader.stage(source.path, workdir, f"t{next_id}")
            except NotATraceError:
                if not source.from_directory:
                    raise
                skipped.append(str(source.path))
                continue
            size = source.path.stat().st_size
            batch.append(_Staged(next_id, label, st, size))
            next_id += 1
            batch_bytes += st.body_bytes
            done += size
            if batch_bytes >= BATCH_BYTES:
                loaded += _load_batch(con, batch, workdir)
                batch, batch_bytes = [], 0
        if batch:
            loaded += _load_batch(con, batch, workdir)
        if progress:
            progress(total, total, "")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if skipped and warn:
        warn(f"skipped {len(skipped)} JSON file(s) without trace events: " + ", ".join(skipped))
    if not loaded:
        raise TraceFormatError(sources[0].path.parent if len(sources) > 1 else sources[0].path, "no traces to load")
    return loaded


def _read_parts(con, batch: list[_Staged], workdir: Path) -> None:
    """Parse every part file of the batch into the ``_stage`` table.

    A part DuckDB cannot parse means a wrong split guess or a malformed file:
    that file is re-staged exactly, which either fixes the split or raises
    an error with the JSON problem's line and column.
    """
    known = ", ".join(_sql_str(k) for k in EVENT_SPEC)
    while True:
        files = [str(p) for st in batch for p in st.staged.parts]
        try:
            con.execute(
                f"""
                CREATE OR REPLACE TEMP TABLE _stage AS
                SELECT filename AS part,
                       json_transform(json, '{_struct_spec(EVENT_SPEC)}') AS e,
                       CASE WHEN list_bool_or(list_transform(json_keys(json), lambda k: k NOT IN ({known})))
                            THEN json END AS extra,
                       CASE WHEN json_type(json) <> 'OBJECT' THEN json_type(json) END AS not_object
                FROM read_json_objects(?, format = 'array', filename = true,
                                       maximum_object_size = 1073741824)
                """,
                [files],
            )
            return
        except duckdb.Error as exc:
            bad = next((st for st in batch if any(str(p) in str(exc) for p in st.staged.parts)), None)
            if bad is None or bad.staged.exact:
                where = bad.staged.path if bad else batch[0].staged.path
                raise TraceFormatError(where, f"invalid JSON in the events array ({_first_line(exc)})") from None
            for p in bad.staged.parts:
                p.unlink(missing_ok=True)
            bad.staged = reader.stage_exact(bad.staged.path, workdir, f"t{bad.trace_id}")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0]
    return text.split("Error: ", 1)[-1]


def _load_batch(con, batch: list[_Staged], workdir: Path) -> int:
    _read_parts(con, batch, workdir)
    part_rows = [(str(p), st.trace_id) for st in batch for p in st.staged.parts]
    con.execute("CREATE OR REPLACE TEMP TABLE _parts (part VARCHAR, trace_id INTEGER)")
    con.executemany("INSERT INTO _parts VALUES (?, ?)", part_rows)
    id_base = con.execute(
        "SELECT coalesce(max(id), -1) + 1 FROM (" + " UNION ALL ".join(f"SELECT max(id) AS id FROM {t}" for t in EVENT_TABLES) + ")"
    ).fetchone()[0]
    # rowid follows the order of the part list, which follows the files, so a
    # row's position in its file is its rowid minus the trace's first rowid.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _first AS
           SELECT p.trace_id, min(s.rowid) AS first_rowid
           FROM _stage s JOIN _parts p USING (part) GROUP BY p.trace_id"""
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _ev AS
        SELECT {id_base} + s.rowid AS id, p.trace_id, s.rowid - f.first_rowid AS ordinal,
               {", ".join(f"s.e.{k} AS {_EV_COLUMN.get(k, k)}" for k in EVENT_SPEC)}, s.extra, s.not_object,
               CAST(s.e.ts * 1000 AS BIGINT) AS ts_ns
        FROM _stage s JOIN _parts p USING (part) JOIN _first f USING (trace_id)
        """
    )
    con.execute("DROP TABLE _stage")
    _check_values(con, batch)
    kind = kind_sql("cat", "ph")
    common = f"id, trace_id, ordinal, {kind} AS kind, cat, name, pid, tid"
    # 2021 traces file record_function ranges under "Operator" like any op;
    # ranges are the ones named without a namespace and without shapes.
    common_slices = common.replace(
        f"{kind} AS kind",
        f"""CASE WHEN cat = 'Operator' AND name NOT LIKE '%::%' AND name NOT LIKE '%Backward%'
                  AND json_extract(args, '$."Input Dims"') IS NULL THEN 'user_annotation' ELSE {kind} END AS kind""",
    )
    args_spec = _struct_spec({k: t for k, _, t in ARGS_FIELDS})
    hot = ", ".join(f'a."{k}" AS {col}' for k, col, _ in ARGS_FIELDS if col != "external_id")
    con.execute(
        f"""
        INSERT INTO slices BY NAME
        SELECT * EXCLUDE (a),
               coalesce(a."External id",
                        CASE WHEN contains(CAST(args AS VARCHAR), '"external id"')
                             THEN TRY_CAST(json_extract_string(args, '$."external id"') AS BIGINT) END) AS external_id,
               {hot}
        FROM (
            SELECT {common_slices}, ts_ns, CAST(dur * 1000 AS BIGINT) AS dur_ns,
                   ts_ns + coalesce(CAST(dur * 1000 AS BIGINT), 0) AS end_ns,
                   args, extra, json_transform(args, '{args_spec}') AS a
            FROM _ev WHERE ph = 'X'
        )
        """
    )
    phase_list = lambda phs: ", ".join(_sql_str(p) for p in phs)  # noqa: E731
    con.execute(
        f"INSERT INTO instants BY NAME SELECT {common}, ph, ts_ns, s AS scope, args, extra FROM _ev "
        f"WHERE ph IN ({phase_list(PHASE_TABLES['instants'])})"
    )
    con.execute(
        f"INSERT INTO flows BY NAME SELECT {common}, ph, ts_ns, ev_id AS flow_id, bp, args, extra FROM _ev "
        f"WHERE ph IN ({phase_list(PHASE_TABLES['flows'])})"
    )
    for table in ("counters", "metadata_events"):
        con.execute(
            f"INSERT INTO {table} BY NAME SELECT {common}, ts_ns, args, extra FROM _ev "
            f"WHERE ph IN ({phase_list(PHASE_TABLES[table])})"
        )
    all_phases = phase_list([p for phs in PHASE_TABLES.values() for p in phs])
    con.execute(
        f"""INSERT INTO other_events BY NAME
            SELECT {common}, ph, ts_ns, CAST(dur * 1000 AS BIGINT) AS dur_ns, ev_id AS flow_id, bp,
                   s AS scope, args, coalesce(extra, CASE WHEN not_object IS NOT NULL THEN to_json(not_object) END) AS extra
            FROM _ev WHERE ph IS NULL OR ph NOT IN ({all_phases})"""
    )
    stats = {
        r[0]: r[1:]
        for r in con.execute(
            """SELECT trace_id, count(*), min(ts_ns) FILTER (WHERE ph <> 'M' OR ph IS NULL),
                      max(ts_ns + coalesce(CAST(dur * 1000 AS BIGINT), 0)) FILTER (WHERE ph <> 'M' OR ph IS NULL)
               FROM _ev GROUP BY trace_id"""
        ).fetchall()
    }
    con.execute("DROP TABLE _ev")
    for st in batch:
        if st.trace_id not in stats:
            raise TraceFormatError(st.staged.path, "JSON without events: 'traceEvents' is empty")
        _insert_trace(con, st, stats.get(st.trace_id, (0, None, None)))
        for p in st.staged.parts:
            p.unlink(missing_ok=True)
    return len(batch)


def _check_values(con, batch: list[_Staged]) -> None:
    """Raise on the first trace with events that are not usable trace events."""
    problem = f"""CASE
        WHEN not_object IS NOT NULL THEN 'is not a JSON object (it is ' || lower(not_object) || ')'
        WHEN ts IS NULL AND coalesce(ph, '') <> 'M' THEN 'has no numeric ''ts'''
        WHEN abs(ts) > {MAX_ABS_TS_US} THEN 'has an absurd ts of ' || ts || ' us'
        WHEN dur < 0 THEN 'has a negative dur of ' || dur || ' us'
        WHEN dur > {MAX_DUR_US} THEN 'has an absurd dur of ' || dur || ' us'
    END"""
    row = con.execute(
        f"""SELECT trace_id, count(*) OVER (PARTITION BY trace_id) AS n, ordinal, ph, name, problem
            FROM (SELECT trace_id, ordinal, ph, name, {problem} AS problem FROM _ev)
            WHERE problem IS NOT NULL ORDER BY trace_id, ordinal LIMIT 1"""
    ).fetchone()
    if row is None:
        return
    trace_id, n, ordinal, ph, name, what = row
    path = next(st.staged.path for st in batch if st.trace_id == trace_id)
    more = f" (and {n - 1} more such events)" if n > 1 else ""
    desc = f"ph={ph!r} name={name!r}" if ph is not None or name is not None else "no ph or name"
    raise TraceFormatError(path, f"event #{ordinal} in traceEvents ({desc}) {what}{more}")


def _device_row(trace_id: int, props: dict) -> tuple:
    def num(*keys):
        for k in keys:
            v = props.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return int(v)
        return None

    major, minor = props.get("computeMajor"), props.get("computeMinor")
    cc = f"{major}.{minor}" if major is not None and minor is not None else None
    return (
        trace_id,
        num("id"),
        props.get("name"),
        cc,
        num("totalGlobalMem"),
        num("numSms"),
        num("warpSize"),
        num("maxThreadsPerBlock"),
        num("maxThreadsPerMultiprocessor"),
        num("regsPerBlock"),
        num("regsPerMultiprocessor"),
        num("sharedMemPerBlock"),
        num("sharedMemPerMultiprocessor", "maxSharedMemoryPerMultiProcessor"),
        num("sharedMemPerBlockOptin"),
        json.dumps(props),
    )


def _insert_trace(con, st: _Staged, stats: tuple) -> None:
    header = st.staged.header
    events, first_ts, last_end = stats
    dist = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else None
    rank, rank_source = None, None
    if dist is not None and isinstance(dist.get("rank"), int):
        rank, rank_source = dist["rank"], "distributedInfo"
    elif (named := rank_from_name(st.staged.path)) is not None:
        rank, rank_source = named, "file name"
    world = dist.get("world_size") if dist else None
    base = header.get("baseTimeNanoseconds")
    con.execute(
        "INSERT INTO traces VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            st.trace_id,
            st.label,
            str(st.staged.path),
            st.staged.form,
            st.file_bytes,
            st.staged.body_bytes,
            events,
            rank,
            rank_source,
            world if isinstance(world, int) else None,
            None if header.get("schemaVersion") is None else str(header.get("schemaVersion")),
            header.get("traceName") if isinstance(header.get("traceName"), str) else None,
            header.get("displayTimeUnit") if isinstance(header.get("displayTimeUnit"), str) else None,
            base if isinstance(base, int) else None,
            first_ts,
            last_end,
            None if dist is None else json.dumps(dist),
            json.dumps(header),
        ],
    )
    devices = header.get("deviceProperties")
    if isinstance(devices, list):
        rows = [_device_row(st.trace_id, d) for d in devices if isinstance(d, dict)]
        if rows:
            con.executemany(f"INSERT INTO devices VALUES ({', '.join('?' * 15)})", rows)
