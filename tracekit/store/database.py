"""The tracekit database: building it atomically, caching it, opening it.

A database is one DuckDB file holding the base tables (``ingest``), the linked
model (``link``) and the views below. ``tracekit_info`` records the schema
version so a file from an older tracekit is rebuilt instead of misread.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import duckdb

from tracekit import __version__
from tracekit.common import locks, outputs, sqlsafety
from tracekit.common.sqltext import Macro, in_list, insert_rows, literal
from tracekit.errors import TraceFormatError, TracekitError
from tracekit.ingest import events_table, ranks
from tracekit.ingest.sources import Source, discover
from tracekit.model import rules
from tracekit.schema import catalog, stages
from tracekit.schema.kinds import GPU_OP_KINDS, LAUNCH_KINDS, orphan_cause_sql
from tracekit.store import pipeline

# Bump whenever a table or column changes meaning: cached databases with
# another version are rebuilt, user-built ones are refused with advice.
SCHEMA_VERSION = 10

# Inputs up to this many bytes of events build the linked model in the load's transaction
# (``build``): a fixed cost saved on small traces; larger ones keep its peak memory lower.
ONE_TRANSACTION_BYTES = 64 << 20

# Views over the base tables: there from the load on.
VIEWS = {
    # GPU ops straight from events, with whether the trace holds a runtime
    # call of the same correlation and, when not, why: the rows of gpu_ops
    # and its orphan_cause, available before (and without) linking, so the
    # GPU timeline of a database just loaded needs no link step.
    "gpu_op_events": f"""
        SELECT *, {orphan_cause_sql("linked", "correlation")} AS orphan_cause FROM (
            SELECT g.id, g.trace_id, g.kind, g.name, g.pid, g.tid, g.ts_ns, g.dur_ns, g.end_ns, g.correlation,
                   g.correlation IN (SELECT r.correlation FROM events r
                                     WHERE r.ph = 'X' AND r.kind IN {in_list(LAUNCH_KINDS)} AND r.trace_id = g.trace_id)
                       IS TRUE AS linked
            FROM events g WHERE g.ph = 'X' AND g.kind IN {in_list(GPU_OP_KINDS)})""",
    "processes": """
        SELECT trace_id, pid,
               max(json_extract_string(args, '$.name')) FILTER (WHERE name = 'process_name') AS name,
               max(json_extract_string(args, '$.labels')) FILTER (WHERE name = 'process_labels') AS labels,
               max(TRY_CAST(json_extract(args, '$.sort_index') AS BIGINT)) FILTER (WHERE name = 'process_sort_index')
                   AS sort_index
        FROM metadata_events
        WHERE name IN ('process_name', 'process_labels', 'process_sort_index')
        GROUP BY trace_id, pid""",
    "threads": """
        SELECT trace_id, pid, tid,
               max(json_extract_string(args, '$.name')) FILTER (WHERE name = 'thread_name') AS name,
               max(TRY_CAST(json_extract(args, '$.sort_index') AS BIGINT)) FILTER (WHERE name = 'thread_sort_index')
                   AS sort_index
        FROM metadata_events
        WHERE name IN ('thread_name', 'thread_sort_index')
        GROUP BY trace_id, pid, tid""",
    # The device side of every collective (the one definition of a communication
    # kernel: is_collective_kernel), with the process group and the instance that
    # matches it across ranks. The cluster queries and clock alignment read it.
    "collective_kernels": """
        WITH k AS (
            SELECT id, trace_id, name, pid, tid, ts_ns, dur_ns, end_ns, external_id, args
            FROM events WHERE ph = 'X' AND kind = 'kernel' AND is_collective_kernel(name)
        ),
        -- The CPU op around the launch records the collective's parameters (record_param_comms,
        -- the kernel's External id); Kineto copies some of them onto the kernel, not always all (Seq).
        op AS (
            SELECT trace_id, external_id, arg_min(args, id) AS args
            FROM events
            WHERE ph = 'X' AND kind = 'cpu_op' AND name = 'record_param_comms' AND external_id IS NOT NULL
            GROUP BY trace_id, external_id
        ),
        a AS (
            SELECT k.id, k.trace_id, k.name, k.pid, k.tid, k.ts_ns, k.dur_ns, k.end_ns,
                   coalesce(json_extract_string(k.args, '$."Collective name"'),
                            json_extract_string(o.args, '$."Collective name"'), collective_of_kernel(k.name)) AS collective,
                   coalesce(json_extract_string(k.args, '$."Process Group Name"'),
                            json_extract_string(o.args, '$."Process Group Name"')) AS pg_name,
                   coalesce(json_extract_string(k.args, '$."Process Group Description"'),
                            json_extract_string(o.args, '$."Process Group Description"')) AS pg_desc,
                   coalesce(json_extract_string(k.args, '$."Process Group Ranks"'),
                            json_extract_string(o.args, '$."Process Group Ranks"')) AS pg_ranks,
                   coalesce(TRY_CAST(json_extract(k.args, '$."Group size"') AS INTEGER),
                            TRY_CAST(json_extract(o.args, '$."Group size"') AS INTEGER)) AS group_size,
                   coalesce(TRY_CAST(json_extract(k.args, '$.Seq') AS BIGINT),
                            TRY_CAST(json_extract(o.args, '$.Seq') AS BIGINT)) AS seq
            FROM k LEFT JOIN op o ON o.trace_id = k.trace_id AND o.external_id = k.external_id
        ),
        g AS (
            SELECT *, concat_ws(' ', coalesce(pg_name, '?'), pg_ranks) AS pg,
                   regexp_matches(lower(collective), '^_?(send|recv|sendrecv|isend|irecv|p2p)')
                       OR regexp_matches(name, '^(nccl|rccl)(Dev)?Kernel_(SendRecv|Send|Recv)') AS p2p
            FROM a
        ),
        i AS (
            SELECT *, coalesce(seq, row_number() OVER (PARTITION BY trace_id, pg, collective ORDER BY ts_ns, id) - 1)
                          AS instance
            FROM g
        )
        SELECT *, row_number() OVER (PARTITION BY trace_id, pg, collective, instance ORDER BY ts_ns, id) - 1 AS part
        FROM i""",
}

# Macros over the base tables: there from the load on (pipeline.MACROS: over the linked tables).
MACROS = (
    Macro(
        "is_collective_kernel",
        "name",
        "Whether a GPU kernel is collective communication: its name contains nccl, rccl or hccl (any case: "
        "ncclKernel_*, ncclDevKernel_* since NCCL 2.19, RCCL's) or cross_device_reduce (vLLM's custom "
        "all-reduce), as TraceLens's GPU timeline counts communication. The one definition of a communication kernel.",
        "regexp_matches(name, '(?i)nccl|rccl|hccl|cross_device_reduce')",
    ),
    Macro(
        "collective_of_kernel",
        "name",
        "The collective a communication kernel's name says (ncclDevKernel_AllReduce_Sum_f32_RING_LL -> allreduce), "
        "lower case; the name's first word when it says none.",
        "lower(coalesce(nullif(regexp_extract(name, '(?i)^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)', 1), ''), "
        "regexp_extract(name, '^[A-Za-z_]+')))",
    ),
    # In (ts, end) order each interval's run_end is the furthest end so far: an island of
    # overlapping intervals starts where an interval begins after every earlier one has ended,
    # and ends where the next begins after run_end (touching intervals are one island). The
    # covered time is the sum of the islands' ends less the sum of their starts. One sort, no
    # per-island grouping: 0.16-0.19 s against 0.26-0.28 s for island ids by two windows and
    # two aggregations (x22's 367k GPU-op intervals in 5 groups, identical results).
    Macro(
        "busy_union",
        "intervals",
        "Union of intervals per group: busy_union(T) where T has columns grp, ts_ns, end_ns gives one row per "
        "grp with busy_ns (covered time, overlaps counted once), first_ns and last_ns.",
        """
        SELECT grp,
               (sum(run_end) FILTER (WHERE next_ts IS NULL OR next_ts > run_end)
                - sum(ts_ns) FILTER (WHERE prev_end IS NULL OR ts_ns > prev_end))::BIGINT AS busy_ns,
               min(ts_ns) AS first_ns, max(run_end) AS last_ns
        FROM (
            SELECT grp, ts_ns, run_end,
                   lag(run_end) OVER (PARTITION BY grp ORDER BY ts_ns, end_ns) AS prev_end,
                   lead(ts_ns) OVER (PARTITION BY grp ORDER BY ts_ns, end_ns) AS next_ts
            FROM (
                SELECT grp, ts_ns, end_ns,
                       max(end_ns) OVER (PARTITION BY grp ORDER BY ts_ns, end_ns ROWS UNBOUNDED PRECEDING) AS run_end
                FROM query_table(intervals)
            )
        )
        GROUP BY grp""",
        table=True,
    ),
    Macro(
        "gpu_op_category",
        "kind, name",
        "The GPU-time bucket of a GPU op as TraceLens's GPU timeline defines it: memcpy (a memcpy, or a ROCm "
        "`__amd_rocclr_copy*` blit kernel), communication (a kernel or memset that is_collective_kernel says is "
        "communication: nccl, rccl, hccl, any case, or cross_device_reduce), else computation (every other kernel, "
        "every memset).",
        """
        CASE WHEN kind = 'memcpy' OR starts_with(name, '__amd_rocclr_copy') THEN 'memcpy'
             WHEN is_collective_kernel(name) THEN 'communication'
             ELSE 'computation' END""",
    ),
    Macro(
        "kernel_base",
        "name",
        "A kernel's name without template and parameter lists (what it does, not its argument types): "
        "kernel-name rules match it. `(anonymous namespace)` is kept as `anonymous_namespace`.",
        "regexp_replace(replace(name, '(anonymous namespace)', 'anonymous_namespace'), '[<(].*$', '')",
    ),
    Macro(
        "block_threads",
        "block",
        "Threads per block of a kernel's block dimensions (gpu_ops.block, [x, y, z]; missing dimensions count 1).",
        "block[1] * coalesce(block[2], 1) * coalesce(block[3], 1)",
    ),
)


def build(
    con: duckdb.DuckDBPyConnection, sources: list[Source], progress=None, warn=None, linked: bool = False
) -> None:
    """Fill an empty connection with the base tables, and the linked ones when ``linked``.

    Without ``linked`` the linked model (cpu_slices, gpu_ops, the stage
    tables, ...) is built on first use: ``pipeline.build``, which the API
    calls for any query that names one of them.
    """
    con.execute("CREATE TABLE tracekit_info (key VARCHAR, value VARCHAR)")
    events_table.create_tables(con)
    # The parse runs outside a transaction: a failed parse is retried (ingest), and a failed
    # statement would abort a transaction. The statements after it (views, COMMENT ON, the
    # rule rows, and for a small input the linked model: ~160) commit once: each one committed
    # alone costs a write of the catalog (COMMENT ON of the base tables: 0.67 s in autocommit,
    # 0.09 s in one transaction). A large input's model commits statement by statement: the
    # link's working tables are dropped as it goes, and in one transaction their memory stays
    # held until the end (v100 x22: peak RSS 910-935 MB per statement, 1,008-1,020 MB in one).
    events_table.ingest(con, sources, progress=progress, warn=warn)
    small = con.execute("SELECT coalesce(sum(events_bytes), 0) FROM traces").fetchall()[0][0] <= ONE_TRANSACTION_BYTES
    with pipeline.transaction(con, commit=commit_checkpointed):
        finish(con, warn)
        comment(con)
        write_info(con, sources)
        if linked and small:
            pipeline.build(con)
    if linked and not small:
        pipeline.build(con)


def commit_checkpointed(con: duckdb.DuckDBPyConnection) -> None:
    """COMMIT the build's transaction as a checkpoint: the rows go into the database file once.

    A plain COMMIT writes the transaction to the write-ahead log, which the
    build's final CHECKPOINT then copies into the file again; a commit larger
    than ``checkpoint_threshold`` checkpoints instead of logging. Measured on the
    linked build, COMMIT + CHECKPOINT + close: v100 x1 0.54-0.69 -> 0.38-0.45 s
    (CPU 0.30-0.33 -> 0.22-0.25 s), x22 0.58 -> 0.44 s.
    """
    threshold = con.execute("SELECT current_setting('checkpoint_threshold')").fetchall()[0][0]
    con.execute("SET checkpoint_threshold = '1B'")
    try:
        con.execute("COMMIT")
    finally:
        con.execute(f"SET checkpoint_threshold = {literal(threshold)}")


def write_info(con: duckdb.DuckDBPyConnection, sources: list[Source]) -> None:
    """The rows of ``tracekit_info`` for a database built from ``sources`` (not yet linked)."""
    info = {
        "schema_version": str(SCHEMA_VERSION),
        "tracekit_version": __version__,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "inputs": json.dumps([str(s.path) for s in sources]),
        "linked": "false",
    }
    insert_rows(con, "tracekit_info", info.items())


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """The base macros and views (macros first: views call them)."""
    for macro in MACROS:
        con.execute(macro.create())
    for name, sql in VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {sql}")


def comment(con: duckdb.DuckDBPyConnection) -> None:
    """The schema's docs as COMMENTs on the base tables, views and their columns."""
    con.execute(catalog.comments(n for n in catalog.TABLES if n not in pipeline.NAMES))


def finish(con: duckdb.DuckDBPyConnection, warn=None) -> None:
    """What follows loading every trace: views and macros, then the checks and clocks across ranks."""
    create_views(con)
    ranks.finish(con, warn)


def link_memory_limit(con: duckdb.DuckDBPyConnection) -> str:
    """The memory cap for linking a database: as for its build, 2.5x the events' JSON size."""
    return _memory_cap(con.execute("SELECT coalesce(sum(events_bytes), 0) FROM traces").fetchall()[0][0])


def writable(path: Path) -> bool:
    """Whether this process may replace the database file ``path`` (the file and its folder)."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


def link_file(path: Path, waiting=None) -> bool:
    """Build the linked tables into the database file ``path``; False when it cannot be written here.

    One process links a file at a time (``locks.exclusive_file``); the others
    wait and then find it linked. The link is built into a copy beside the
    file and renamed over it, so processes reading ``path`` meanwhile (and
    queries that need no linked table) never wait and never see a half-built
    file. A folder or file this process may not write returns False: the
    caller links for its session only.
    """
    if not writable(path):
        return False
    with locks.exclusive_file(path, "linking it", waiting):
        # The file as it is now: a plain connect could return this process's cached instance of
        # the file as it was before another linker renamed its copy over it.
        con = duckdb.connect()
        try:
            con.execute(f"ATTACH {literal(str(path))} AS linking (READ_ONLY)")
            con.execute("USE linking")
            if pipeline.is_built(con):
                return True
            limit = link_memory_limit(con)
        finally:
            con.close()
        try:
            with outputs.replacing(path) as tmp:
                shutil.copyfile(path, tmp)
                wal = path.with_name(path.name + ".wal")
                if wal.exists():
                    shutil.copyfile(wal, tmp.with_name(tmp.name + ".wal"))
                con = connect_writer(tmp, limit)
                try:
                    with pipeline.transaction(con, commit=commit_checkpointed):
                        pipeline.build(con)
                    con.execute("CHECKPOINT")
                finally:
                    con.close()
                shutil.copymode(path, tmp)
                # The copy took the old log's contents and checkpointed them: a stale log must not replay.
                wal.unlink(missing_ok=True)
        except PermissionError:
            return False
    return True


def build_file(
    paths,
    out: Path,
    progress=None,
    warn=None,
    memory_limit: str | None = None,
    linked: bool = False,
) -> Path:
    """Load ``paths`` (files or directories) into the DuckDB file ``out``, atomically.

    The database is written to a temporary file beside ``out`` and renamed
    over it only when complete, so a failure leaves no half-written output.
    ``memory_limit`` caps DuckDB's memory (e.g. "2GB"); by default it scales
    with the input (see ``auto_memory_limit``).
    """
    return _build_file(discover(paths), Path(out), progress, warn, memory_limit, linked)


def uncompressed_bytes(path: Path) -> int:
    """Size of a trace once decompressed (gzip records it, modulo 4 GiB, in its last 4 bytes)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b" or size < 18:
            return size
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
    # ISIZE wraps at 4 GiB; a compressed trace is rarely smaller than 1/20 of the original.
    while isize < size:
        isize += 1 << 32
    return isize


def auto_memory_limit(sources: list[Source]) -> str:
    """DuckDB memory cap for a build: 2.5x the uncompressed input, at least 512 MB.

    DuckDB otherwise takes up to 80 % of the machine's RAM for a build that
    needs far less; a cap proportional to the input keeps a laptop usable
    (what does not fit is written to disk as the build goes).
    """
    return _memory_cap(sum(uncompressed_bytes(s.path) for s in sources))


def _memory_cap(input_bytes: int) -> str:
    """$TRACEKIT_MEMORY_LIMIT, else 2.5x ``input_bytes`` and at least 512 MB."""
    env = os.environ.get("TRACEKIT_MEMORY_LIMIT")
    if env:
        return sqlsafety.memory_limit(env, "TRACEKIT_MEMORY_LIMIT")
    return f"{max(512 << 20, int(2.5 * input_bytes)) >> 20}MB"


def connect_writer(
    path: Path, limit: str, merge: bool = False, threads: int | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection that writes the database ``path``, capped at ``limit`` (``threads``: DuckDB's
    threads, default all).

    One checkpoint at the end: automatic ones mid-build rewrite the same
    freshly loaded data more than once. Rows written in bulk (events, the
    linked tables) go to the file one row group at a time: DuckDB's default
    (5 per thread) held nearly all of a table's new rows in memory until its
    statement ended, ~140 MB for x22's cpu_slices beside that join's hash table.
    Peak RSS of stages x22 832-854 -> 809-827 MB, x27 ~1,010 -> ~900 (its copy into
    events 811-853 -> 712); writing x22's events: 2.52 -> 2.38 CPU-s (medians of 4, loaded).

    No vacuum at the checkpoint, unless the connection ``merge``s many databases into one: a
    table written by a parallel statement ends with a part-filled row group per thread, which
    the checkpoint's vacuum merged by compressing their rows again on one core (x22: the final
    checkpoint 0.20 s, rewriting ~200k rows of runtime_calls; without it 0.014 s; stages
    6.35 -> 6.06-6.13 s, two runs of 5 alternating pairs, quiet). The few part-filled groups
    cost a build nothing. A merge of many files' parts keeps the vacuum: there they can number
    hundreds.
    """
    config: dict[str, str | bool | int | float | list[str]] = {
        "checkpoint_threshold": "1TB",
        "memory_limit": limit,
        "write_buffer_row_group_count": 1,
    }
    if not merge:
        config["max_vacuum_tasks"] = 0
    if threads:
        config["threads"] = str(threads)
    return duckdb.connect(str(path), config=config)


def _build_file(
    sources: list[Source], out: Path, progress, warn, memory_limit=None, linked: bool = False, inputs=()
) -> Path:
    duckdb_path(out)
    limit = sqlsafety.memory_limit(memory_limit, "--memory-limit") if memory_limit else auto_memory_limit(sources)
    with outputs.replacing(out, inputs=[s.path for s in sources] + list(inputs)) as tmp:
        con = connect_writer(tmp, limit)
        try:
            build(con, sources, progress=progress, warn=warn, linked=linked)
            con.execute("CHECKPOINT")
        finally:
            con.close()
    return out


def duckdb_path(path: Path) -> Path:
    """``path``, if DuckDB can open it: it reads a backslash as a folder separator, on every system."""
    if "\\" in str(path) and os.sep != "\\":
        raise TracekitError(f"{path}: DuckDB cannot use a path with a backslash in it; choose another name or folder")
    return path


def check_version(con: duckdb.DuckDBPyConnection, path) -> None:
    """Refuse a database that is not a tracekit database of this schema."""
    try:
        rows = dict(con.execute("SELECT key, value FROM tracekit_info").fetchall())
    except duckdb.Error:
        raise TraceFormatError(path, "not a tracekit database (no tracekit_info table)") from None
    found = rows.get("schema_version")
    if found != str(SCHEMA_VERSION):
        raise TraceFormatError(
            path,
            f"built with tracekit schema {found}, this tracekit reads schema {SCHEMA_VERSION}: rebuild it with 'tracekit load'",
        )


def cache_dir() -> Path:
    """Where databases of raw traces are cached: $TRACEKIT_CACHE_DIR or ~/.cache/tracekit."""
    env = os.environ.get("TRACEKIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tracekit"


PACKAGE = Path(__file__).resolve().parent.parent


def code_files(package: Path = PACKAGE, stages_csv: Path | None = None) -> list[Path]:
    """Every file that decides a database's contents besides the inputs: tracekit's code and model SQL
    (every module of every layer), the shipped rule tables, the stage vocabulary (``stages_csv``,
    default the installed one) and the user rule folders of $TRACEKIT_RULES_PATH."""
    files = sorted(
        p for p in package.rglob("*") if p.suffix in (".py", ".sql", ".csv") and "__pycache__" not in p.parts
    )
    files.append(stages_csv or stages.csv_path())
    files += [p for d in rules.search_path()[:-1] for p in sorted(d.glob("*.csv"))]
    return files


def code_fingerprint(package: Path = PACKAGE, stages_csv: Path | None = None) -> str:
    """Hash of ``code_files``: each file's name (its path inside the package where it is there) and bytes."""
    h = hashlib.sha256()
    for f in code_files(package, stages_csv):
        name = f.relative_to(package).as_posix() if f.is_relative_to(package) else f.name
        h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def cache_key(sources: list[Source]) -> str:
    """A key that changes when an input file, tracekit, its rules or the schema change."""
    h = hashlib.sha256(f"schema={SCHEMA_VERSION};tracekit={__version__};code={code_fingerprint()}".encode())
    for s in sources:
        st = s.path.stat()
        # ctime and inode too: a file rewritten with the same size and a restored mtime still changes them.
        h.update(f"|{s.path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}".encode())
    return h.hexdigest()[:24]


def cached_build(paths, progress=None, warn=None, linked: bool = False, waiting=None) -> Path:
    """Path of a database for raw trace ``paths``, building it on first use.

    ``linked`` builds the linked model in the same pass when the database is
    built here (for a caller about to query it): one connection and one
    checkpoint instead of a load, a reopen and a second write of the file.
    One process builds a cache entry (under a lock in the cache folder); the
    others wait for it (``waiting(seconds)``) rather than build it again.
    """
    sources = discover(paths)
    directory = duckdb_path(cache_dir())
    directory.mkdir(parents=True, exist_ok=True)
    key = cache_key(sources)
    out = directory / f"{key}.duckdb"
    if out.exists():
        try:
            os.utime(out)  # last use, for evicting the least recently used
        except OSError:
            pass
        return out
    with locks.exclusive(directory / f"{key}.lock", "building its cache entry", waiting):
        if not out.exists():
            _build_file(sources, out, progress, warn, linked=linked)
            evict(keep=out)
    return out


# ---- the cache's housekeeping --------------------------------------------

DEFAULT_CACHE_MAX = "5GB"
_SIZE = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    """``5GB``, ``500 MB``, ``1.5GiB``, ``0`` (no cap) -> bytes."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _SIZE:
        raise TracekitError(f"cache size {text!r} is not a size such as 5GB or 500MB")
    return int(float(m.group(1)) * _SIZE[m.group(2).upper()])


def cache_max() -> int:
    """The cache's size cap in bytes: $TRACEKIT_CACHE_MAX (default 5GB; 0: no cap)."""
    return parse_size(os.environ.get("TRACEKIT_CACHE_MAX") or DEFAULT_CACHE_MAX)


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, path.with_name(path.name + ".wal")) if p.exists())


def _remove_entry(path: Path) -> None:
    """Delete the cached database ``path``, its write-ahead log, and the lock its build took (else
    one empty lock file per trace ever cached stayed behind). A process still waiting on that lock
    finds the database gone and builds it again: the build is renamed into place whole, so two
    builds of one entry waste time but never mix."""
    for p in (path, path.with_name(path.name + ".wal"), path.with_suffix(".lock")):
        p.unlink(missing_ok=True)


def cache_entries() -> list[dict]:
    """The cached databases, most recently used first: file, bytes, last use, the traces they hold."""
    d = cache_dir()
    out = []
    for f in d.glob("*.duckdb") if d.is_dir() else []:
        inputs: list[str] = []
        try:
            con = duckdb.connect(str(f), read_only=True)
            try:
                row = con.execute("SELECT value FROM tracekit_info WHERE key = 'inputs'").fetchall()
                inputs = json.loads(row[0][0]) if row else []
            finally:
                con.close()
        except (duckdb.Error, ValueError, IndexError):
            inputs = []  # in use by a writer, or not a tracekit database: listed without its inputs
        st = f.stat()
        out.append({"file": f.name, "size_bytes": _bytes(f), "last_used": st.st_mtime, "inputs": inputs})
    return sorted(out, key=lambda e: -e["last_used"])


def cache_clear(older_than_s: float | None = None) -> tuple[int, int]:
    """Delete cached databases (only those unused for ``older_than_s`` seconds when given):
    (files, bytes) removed."""
    d = cache_dir()
    n = freed = 0
    now = time.time()
    for f in list(d.glob("*.duckdb")) if d.is_dir() else []:
        if older_than_s is not None and now - f.stat().st_mtime < older_than_s:
            continue
        size = _bytes(f)
        _remove_entry(f)
        n, freed = n + 1, freed + size
    return n, freed


def evict(keep: Path | None = None) -> list[Path]:
    """Delete the least recently used cached databases until the cache fits ``cache_max()``
    (``keep``, the one just built, stays). Returns the files removed."""
    cap = cache_max()
    d = cache_dir()
    if not cap or not d.is_dir():
        return []
    files = sorted(d.glob("*.duckdb"), key=lambda f: f.stat().st_mtime)
    total = sum(_bytes(f) for f in files)
    removed = []
    for f in files:
        if total <= cap:
            break
        if keep is not None and f.resolve() == keep.resolve():
            continue
        size = _bytes(f)
        try:
            _remove_entry(f)
        except OSError:
            continue
        total -= size
        removed.append(f)
    return removed
