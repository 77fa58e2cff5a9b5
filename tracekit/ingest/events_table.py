"""Building tables: staged events -> the ``events`` table, one row per event.

Every event of every input file becomes exactly one row of ``events``,
whatever its phase: complete slices (``X``), instants, flows, counters,
metadata and anything else (``B``/``E``, unknown phases, no ``ph``); views
per phase (``slices``, ``instants``, ``flows``, ...) select from it. Each row
keeps its position in the file (``ordinal``), its raw ``cat``, its ``args``
as JSON and, when the event has keys beyond the Chrome trace format's usual
ones, the whole event in ``extra``: nothing is dropped.

Events are parsed and typed by one parallel, order-preserving DuckDB
statement over the staged part files into a TEMP batch table (the reader's
one-parse typed read when its count proves it dropped no key, else its exact
read: see ``reader``). The rows are then copied into ``events`` unordered,
so DuckDB compresses them in parallel as they are written, each with its
``kind`` and, from its row number in the batch, its ``id`` and file
``ordinal`` (numbering during the scan would serialize it).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from tracekit.common import outputs, sqlmodules
from tracekit.common.sqltext import insert_rows, literal
from tracekit.errors import NotATraceError, TraceFormatError, first_line
from tracekit.ingest import formats, ranks
from tracekit.ingest.formats import StagedTrace
from tracekit.ingest.sources import Source, trace_labels
from tracekit.schema import catalog
from tracekit.schema.kinds import CATEGORY_KINDS

# Bounds past which a value is corrupt, not merely unusual: ts must fit
# int64 nanoseconds; no profiler window lasts 11 days.
MAX_ABS_TS_US = 9_000_000_000_000_000
MAX_DUR_US = 1_000_000_000_000

BATCH_BYTES = 1 << 30

# The base tables, with their columns as declared in ``schema``.
BASE_TABLES = ("traces", "devices", "events")

# The per-phase views of events; other_events takes the rest.
PHASE_VIEWS = {
    "slices": ("X",),
    "instants": ("i", "I", "R"),
    "flows": ("s", "t", "f"),
    "counters": ("C",),
    "metadata_events": ("M",),
}

Progress = Callable[[int, int, str], None]


@dataclass
class _Staged:
    """One trace of a batch: its id and label, its staged parts and the reader that reads them."""

    trace_id: int
    label: str
    staged: StagedTrace
    file_bytes: int
    reader: formats.Reader
    from_directory: bool = False  # found by walking a directory: an empty one is skipped, not an error


# Columns stored with a compression of their own rather than the one DuckDB picks. events.args
# (large JSON texts): zstd writes it in far less CPU time than DuckDB's default string
# compression, into fewer bytes (bench/HISTORY.md, "Figures behind code comments").
COMPRESSION = {("events", "args"): "zstd"}


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the empty base tables and the per-phase views of ``events``."""
    for name in BASE_TABLES:
        columns = ", ".join(
            f"{c.name} {c.type}"
            + (f" USING COMPRESSION {COMPRESSION[name, c.name]}" if (name, c.name) in COMPRESSION else "")
            for c in catalog.TABLES[name].columns
        )
        con.execute(f"CREATE TABLE {name} ({columns})")
    phase_views(con)


def phase_views(con: duckdb.DuckDBPyConnection) -> None:
    """The per-phase views of ``events`` (``PHASE_VIEWS``) and ``other_events``, the rest."""
    for name, phases in PHASE_VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM events WHERE ph IN ({', '.join(map(literal, phases))})")
    every = ", ".join(literal(p) for phases in PHASE_VIEWS.values() for p in phases)
    con.execute(f"CREATE VIEW other_events AS SELECT * FROM events WHERE ph IS NULL OR ph NOT IN ({every})")


def ingest(
    con: duckdb.DuckDBPyConnection,
    sources: list[Source],
    progress: Progress | None = None,
    tmp_dir: str | None = None,
    warn: Callable[[str], None] | None = None,
    labels: list[str] | None = None,
    relabel: bool = True,
) -> int:
    """Load ``sources`` into the base tables of ``con``; return traces loaded.

    ``labels`` are the traces' display labels (default: from the paths of
    ``sources``; a worker loading part of a folder is given the folder's).
    With ``relabel``, traces recorded by ``tracekit capture`` are then
    labelled by what they recorded (``capture_labels``); a worker loading one
    file of many passes False, since only the whole folder tells which
    labels are unique (the merge relabels).

    Files found by walking a directory that turn out not to be traces (a
    manifest beside the traces) are skipped with a warning; any other bad
    file raises ``TraceFormatError`` naming it.
    """
    total = sum(s.path.stat().st_size for s in sources)
    labels = labels or trace_labels([s.path for s in sources])
    outputs.clean_staging(tmp_dir)  # what loads killed mid-way left behind
    first_id = con.execute("SELECT coalesce(max(trace_id), 0) + 1 FROM traces").fetchall()[0][0]
    skipped: list[str] = []
    workdir = Path(tempfile.mkdtemp(prefix=outputs.stage_prefix(), dir=tmp_dir))
    try:
        loaded = _stage_and_load(con, sources, labels, first_id, workdir, skipped, progress, total)
    except (OSError, duckdb.Error) as exc:
        # Python writes only the staging copy; DuckDB's errors name the file they failed on.
        if outputs.is_space_error(exc) and (isinstance(exc, OSError) or str(workdir) in str(exc)):
            raise TraceFormatError(
                sources[0].path,
                f"out of space while staging in {workdir.parent} (TMPDIR: a load needs about the uncompressed "
                "trace's size there; set TMPDIR to a folder with room)",
            ) from None
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if skipped and warn:
        warn(f"skipped {len(skipped)} JSON file(s) without trace events: " + ", ".join(skipped))
    if not loaded:
        raise TraceFormatError(sources[0].path.parent if len(sources) > 1 else sources[0].path, "no traces to load")
    if relabel:
        capture_labels(con, first_id)
    return loaded


def _stage_and_load(
    con: duckdb.DuckDBPyConnection,
    sources: list[Source],
    labels: list[str],
    first_id: int,
    workdir: Path,
    skipped: list[str],
    progress: Progress | None,
    total: int,
) -> int:
    """Stage each source into ``workdir`` and load the staged traces in batches (about ``BATCH_BYTES``
    of events each, one reader per batch), numbered from ``first_id``; return the traces loaded. A
    file found in a directory that is not a trace is added to ``skipped``."""
    done = 0
    loaded = 0
    trace_id = first_id
    batch: list[_Staged] = []
    batch_bytes = 0
    for source, label in zip(sources, labels):
        if progress:
            progress(done, total, str(source.path))
        reader = formats.for_path(source.path)
        if batch and reader is not batch[0].reader:  # a batch is read by one reader's SELECT
            loaded += _load_batch(con, batch, workdir, skipped)
            batch, batch_bytes = [], 0
        try:
            staged = reader.stage(source.path, workdir, f"t{trace_id}")
        except NotATraceError:
            if not source.from_directory:
                raise
            skipped.append(str(source.path))
            continue
        size = source.path.stat().st_size
        batch.append(_Staged(trace_id, label, staged, size, reader, source.from_directory))
        trace_id += 1
        batch_bytes += staged.body_bytes
        done += size
        if batch_bytes >= BATCH_BYTES:
            loaded += _load_batch(con, batch, workdir, skipped)
            batch, batch_bytes = [], 0
    if batch:
        loaded += _load_batch(con, batch, workdir, skipped)
    if progress:
        progress(total, total, "")
    return loaded


def capture_labels(con: duckdb.DuckDBPyConnection, first_id: int = 1) -> None:
    """Traces recorded by ``tracekit capture`` (top-level ``tracekit_capture``) are labelled by
    what was recorded, not by their long file names (rank, host, timestamp): the impl, then
    impl-device, then impl-rankN, whichever is unique among all labels; else the name stays."""
    rows = con.execute(sqlmodules.text("ingest/capture_labels")).fetchall()
    mine = [r for r in rows if r[0] >= first_id and r[2]]
    if not mine:
        return
    fixed = [r[1] for r in rows if r[0] < first_id or not r[2]]
    for make in (
        lambda r: r[2],
        lambda r: f"{r[2]}-{r[3]}" if r[3] else None,
        lambda r: f"{r[2]}-rank{r[4]}" if r[4] is not None else None,
    ):
        wanted = [make(r) for r in mine]
        if None not in wanted and len(set(wanted)) == len(wanted) and not set(wanted) & set(fixed):
            con.executemany("UPDATE traces SET trace = ? WHERE trace_id = ?", [(w, r[0]) for w, r in zip(wanted, mine)])
            return


def _insert_events(con, batch: list[_Staged], workdir: Path, id_base: int) -> None:
    """Insert and number the batch's events: by the reader's typed read when it proves exact, else its
    exact read (``_insert_exact``)."""
    con.execute("CREATE OR REPLACE TEMP TABLE _events_batch AS SELECT *, NULL::BIGINT AS _colons FROM events LIMIT 0")
    if not _insert_typed(con, batch):
        _insert_exact(con, batch, workdir)
    # The insert kept file order (parallel, order-preserving), so the row
    # number is the ordinal, and plus the batch's base the id: numbering the
    # rows during the scan would serialize it. Both are filled on the copy
    # below rather than by an UPDATE of the batch, which rewrote every row.
    first_rows = dict(con.execute("SELECT trace_id, min(rowid) FROM _events_batch GROUP BY trace_id").fetchall())
    try:
        # A failed load leaves no output: the caller discards the database.
        _check_values(con, batch, "_events_batch", first_rows)
        if first_rows:
            # Rows carry their ids now, so the copy into the stored table need not
            # keep their order: unordered, DuckDB compresses and writes row groups
            # in parallel during the insert instead of at the final checkpoint.
            con.execute("SET preserve_insertion_order = false")
            try:
                con.execute(f"INSERT INTO events BY NAME {_copy_select('_events_batch', id_base, first_rows)}")
            finally:
                con.execute("RESET preserve_insertion_order")
    finally:
        con.execute("DROP TABLE _events_batch")


def _insert_typed(con, batch: list[_Staged]) -> bool:
    """Insert the batch by the reader's typed read (one parse per event); False, with the batch table
    empty, when it does not prove exact for every trace of the batch.

    The proof (see ``reader.typed_sql``): per trace, the ``_colons`` of its
    rows add up to the ``:`` bytes staging counted. A read that fails (a
    value of another type, an element that is not an object, a bad split
    guess) proves nothing either: the exact read then says what is wrong.
    """
    reader = batch[0].reader
    if reader.typed_sql is None or any(trace.staged.colons is None for trace in batch):
        return False
    try:
        con.execute(f"INSERT INTO _events_batch BY NAME {reader.typed_sql([trace.staged for trace in batch])}")
        sums = dict(con.execute("SELECT trace_id, sum(_colons) FROM _events_batch GROUP BY trace_id").fetchall())
    except duckdb.InterruptException:
        raise
    except duckdb.Error:
        sums = None
    if sums is not None and all(sums.get(trace.trace_id, 0) == trace.staged.colons for trace in batch):
        return True
    # Row ids number the events (below): the exact read starts again from an empty table.
    con.execute("CREATE OR REPLACE TEMP TABLE _events_batch AS SELECT * FROM _events_batch LIMIT 0")
    return False


def _insert_exact(con, batch: list[_Staged], workdir: Path) -> None:
    """Insert the batch by the reader's exact read; re-stage exactly any file DuckDB cannot parse.

    A part DuckDB cannot parse means a wrong split guess or a malformed file:
    that file is re-staged exactly, which either fixes the split or raises an
    error with the JSON problem's line and column.
    """
    while True:
        try:
            parts = [p for trace in batch for p in trace.staged.parts]
            con.execute(f"INSERT INTO _events_batch BY NAME {batch[0].reader.select_sql(parts)}")
        except duckdb.Error as exc:
            bad = next((trace for trace in batch if any(str(p) in str(exc) for p in trace.staged.parts)), None)
            if bad is None or bad.staged.exact or "JSON" not in str(exc):
                # The staging copy's name means nothing to the user: the error names the trace.
                message = re.sub(r'\s*in file "[^"]*",?', "", _first_line(exc))
                if "invalid UTF-8" in message:
                    message += " (the trace must be UTF-8 text)"
                raise TraceFormatError(
                    bad.staged.path if bad else batch[0].staged.path, f"cannot load: {message}"
                ) from None
            for p in bad.staged.parts:
                p.unlink(missing_ok=True)
            bad.staged = bad.reader.stage_exact(bad.staged.path, workdir, f"t{bad.trace_id}")
            continue
        break


def _copy_select(table: str, id_base: int, first_rows: dict[int, int]) -> str:
    """The rows of the batch ``table`` as rows of ``events`` (``ingest/copy_events``): numbered from ``id_base``,
    each trace's ``ordinal`` from its first row (``first_rows``), with their normalized ``kind``."""
    return sqlmodules.text(
        "ingest/copy_events",
        batch=table,
        id_base=int(id_base),
        first_rows=[(int(t), int(r)) for t, r in first_rows.items()],
        category_kinds=list(CATEGORY_KINDS.items()),
    )


def _first_line(exc: Exception) -> str:
    """The error's first line without DuckDB's "... Error: " prefix."""
    return first_line(exc).split("Error: ", 1)[-1]


def _load_batch(con, batch: list[_Staged], workdir: Path, skipped: list[str]) -> int:
    id_base = con.execute("SELECT count(*) FROM events").fetchall()[0][0]
    _insert_events(con, batch, workdir, id_base)
    stats = {r[0]: r[1:] for r in con.execute(sqlmodules.text("ingest/batch_stats", id_base=int(id_base))).fetchall()}
    loaded = 0
    for trace in batch:
        if trace.trace_id not in stats:
            if trace.from_directory:  # one empty rank does not fail the directory
                skipped.append(str(trace.staged.path))
                continue
            raise TraceFormatError(trace.staged.path, "JSON without events: 'traceEvents' is empty")
        loaded += 1
        try:
            _insert_trace(con, trace, stats[trace.trace_id])
        except duckdb.Error as exc:
            problem = _first_line(exc)
            if "surrogate" in problem:
                problem = "invalid UTF-8 in a header string (the trace must be UTF-8 text)"
            raise TraceFormatError(trace.staged.path, f"a header value cannot be stored: {problem}") from None
        for p in trace.staged.parts:
            p.unlink(missing_ok=True)
    return loaded


def _check_values(con, batch: list[_Staged], table: str, first_rows: dict[int, int]) -> None:
    """Raise on the first trace with events that are not usable trace events (``table``'s rows in
    file order, each trace's from its row ``first_rows[trace_id]``)."""
    rows = con.execute(
        sqlmodules.text(
            "ingest/bad_value", batch=table, max_abs_ts_ns=MAX_ABS_TS_US * 1000, max_dur_ns=MAX_DUR_US * 1000
        )
    ).fetchall()
    if not rows:
        return
    trace_id, n, row, ph, name, what = rows[0]
    path = next(trace.staged.path for trace in batch if trace.trace_id == trace_id)
    more = f" (and {n - 1} more such events)" if n > 1 else ""
    desc = f"ph={ph!r} name={name!r}" if ph is not None or name is not None else "no ph or name"
    raise TraceFormatError(path, f"event #{row - first_rows[trace_id]} in traceEvents ({desc}) {what}{more}")


def _device_row(trace_id: int, props: dict) -> tuple:
    def number(*keys):
        for k in keys:
            v = props.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return int(v)
        return None

    major, minor = props.get("computeMajor"), props.get("computeMinor")
    compute_capability = f"{major}.{minor}" if major is not None and minor is not None else None
    return (
        trace_id,
        number("id"),
        props.get("name"),
        compute_capability,
        number("totalGlobalMem"),
        number("numSms"),
        number("warpSize"),
        number("maxThreadsPerBlock"),
        number("maxThreadsPerMultiprocessor"),
        number("regsPerBlock"),
        number("regsPerMultiprocessor"),
        number("sharedMemPerBlock"),
        number("sharedMemPerMultiprocessor", "maxSharedMemoryPerMultiProcessor"),
        number("sharedMemPerBlockOptin"),
        json.dumps(props),
    )


def _insert_trace(con, trace: _Staged, stats: tuple) -> None:
    header = trace.staged.header
    events, first_ts, last_end = stats
    distributed = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else None
    base = header.get("baseTimeNanoseconds")
    row = {
        "trace_id": trace.trace_id,
        "trace": trace.label,
        "path": str(trace.staged.path),
        "form": trace.staged.form,
        "file_bytes": trace.file_bytes,
        "events_bytes": trace.staged.body_bytes,
        "events": events,
        **ranks.identity(header, trace.staged.path),
        "loaded_on": ranks.loaded_on(),
        "schema_version": None if header.get("schemaVersion") is None else str(header.get("schemaVersion")),
        "trace_name": header.get("traceName") if isinstance(header.get("traceName"), str) else None,
        "display_time_unit": header.get("displayTimeUnit") if isinstance(header.get("displayTimeUnit"), str) else None,
        "base_time_ns": base if isinstance(base, int) else None,
        "first_ts_ns": first_ts,
        "last_end_ns": last_end,
        "distributed_info": None if distributed is None else json.dumps(distributed),
        "metadata": json.dumps(header),
    }
    con.execute(
        f"INSERT INTO traces ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
        list(row.values()),
    )
    devices = header.get("deviceProperties")
    if isinstance(devices, list):
        rows = [_device_row(trace.trace_id, d) for d in devices if isinstance(d, dict)]
        if rows:
            insert_rows(con, "devices", rows)
