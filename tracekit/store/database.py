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
from tracekit.common import locks, outputs, sqlmodules, sqlsafety
from tracekit.common.sqltext import insert_rows, literal
from tracekit.errors import TraceFormatError, TracekitError, first_line
from tracekit.ingest import events_table, ranks
from tracekit.ingest.sources import Source, discover
from tracekit.model import rules
from tracekit.schema import catalog, stages
from tracekit.schema.kinds import GPU_OP_KINDS, LAUNCH_KINDS, ORPHAN_CAUSES
from tracekit.store import pipeline

# Bump whenever a table or column changes meaning: cached databases with
# another version are rebuilt, user-built ones are refused with advice.
SCHEMA_VERSION = 12

# Inputs up to this many bytes of events build the linked model in the load's transaction
# (``build``): a fixed cost saved on small traces; larger ones keep its peak memory lower.
ONE_TRANSACTION_BYTES = 64 << 20

# The base macros and views (store/sql/base_macros, store/sql/base_views): there from the load on, over the
# base tables (pipeline's macros and views: over the linked tables). Macros first: views call them.
# In the order they are created: a macro or view binds those it calls when it is created.
MACRO_ORDER = (
    "orphan_cause", "is_orphan", "is_collective_kernel", "collective_of_kernel", "busy_union", "gpu_op_category",
    "kernel_base", "block_threads", "gemm_op_names", "gemm_kn", "gemm_shape",
)  # fmt: skip
MACROS = tuple(sqlmodules.module(f"store/base_macros/{name}") for name in MACRO_ORDER)
VIEW_MODULES = tuple(sqlmodules.folder("store/base_views"))
VIEWS = tuple(name for view in VIEW_MODULES for name in view.creates)
# The vocabulary the base macros and views are written with: each takes the parameters it declares.
VOCABULARY: dict[str, object] = {
    "before_trace": ORPHAN_CAUSES[0],
    "no_correlation": ORPHAN_CAUSES[1],
    "launch_kinds": LAUNCH_KINDS,
    "gpu_kinds": GPU_OP_KINDS,
}


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
    # alone costs a write of the catalog, which made the COMMENT ONs several times slower. A large
    # input's model commits statement by statement: the link's working tables are dropped as it
    # goes, and in one transaction their memory stays held until the end, which raised the
    # build's peak RSS (bench/HISTORY.md, "Figures behind code comments").
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
    than ``checkpoint_threshold`` checkpoints instead of logging, so the rows are
    written once (bench/HISTORY.md, "Figures behind code comments").
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
        sqlmodules.run_with(con, macro, VOCABULARY, macro="MACRO")
    for view in VIEW_MODULES:
        sqlmodules.run_with(con, view, VOCABULARY)


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
                except duckdb.OutOfMemoryException as exc:
                    raise out_of_memory(path, limit, exc, "linking it") from None
                finally:
                    con.close()
                shutil.copymode(path, tmp)
                # The copy took the old log's contents and checkpointed them: a stale log must not replay.
                wal.unlink(missing_ok=True)
        except PermissionError:
            return False
    return True


def out_of_memory(path, limit: str, exc: BaseException, doing: str) -> TracekitError:
    """The one line of an out-of-memory error: the file, the cap, and what to do."""
    first = first_line(exc)
    return TracekitError(
        f"{path}: out of memory {doing} under the memory cap {limit} ({first}); raise the cap with "
        "--memory-limit or TRACEKIT_MEMORY_LIMIT (e.g. 8GB or 50%)"
    )


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
    return _memory_cap(sum(estimated_bytes(s.path) for s in sources))


def estimated_bytes(path: Path) -> int:
    """``uncompressed_bytes``, or 0 for a file that cannot be read: estimating the cap opens no file's
    failure before its load task does (that task names the file and the cause)."""
    try:
        return uncompressed_bytes(path)
    except OSError:
        return 0


def _memory_cap(input_bytes: int) -> str:
    """$TRACEKIT_MEMORY_LIMIT, else 2.5x ``input_bytes`` and at least 512 MB."""
    env = os.environ.get("TRACEKIT_MEMORY_LIMIT")
    if env:
        return sqlsafety.memory_limit(env, "TRACEKIT_MEMORY_LIMIT")
    return f"{max(512 << 20, int(2.5 * input_bytes)) >> 20}MB"


def connect_writer(
    path: Path | str, limit: str, merge: bool = False, threads: int | None = None, spill: str | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection that writes the database ``path``, capped at ``limit`` (``threads``: DuckDB's
    threads, default all; ``spill``: the folder DuckDB spills to past the cap, which an in-memory
    ``path`` needs).

    One checkpoint at the end: automatic ones mid-build rewrite the same
    freshly loaded data more than once. Rows written in bulk (events, the
    linked tables) go to the file one row group at a time: DuckDB's default
    (5 per thread) held nearly all of a table's new rows in memory until its
    statement ended, beside that statement's join; flushed sooner, they lower the
    build's peak RSS and cost no time.

    No vacuum at the checkpoint, unless the connection ``merge``s many databases into one: a
    table written by a parallel statement ends with a part-filled row group per thread, which
    the checkpoint's vacuum merged by compressing their rows again on one core, most of the
    final checkpoint's time. The few part-filled groups cost a build nothing. A merge of many
    files' parts keeps the vacuum: there they can number hundreds. (The measurements of both:
    bench/HISTORY.md, "Figures behind code comments".)
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
    if spill:
        config["temp_directory"] = spill
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
        except duckdb.OutOfMemoryException as exc:
            raise out_of_memory(", ".join(str(s.path) for s in sources[:3]), limit, exc, "loading it") from None
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
    digest = hashlib.sha256()
    for file in code_files(package, stages_csv):
        name = file.relative_to(package).as_posix() if file.is_relative_to(package) else file.name
        digest.update(name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_key(sources: list[Source]) -> str:
    """A key that changes when an input file, tracekit, its rules or the schema change."""
    digest = hashlib.sha256(f"schema={SCHEMA_VERSION};tracekit={__version__};code={code_fingerprint()}".encode())
    for source in sources:
        stat = source.path.stat()
        # ctime and inode too: a file rewritten with the same size and a restored mtime still changes them.
        digest.update(
            f"|{source.path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ctime_ns}|{stat.st_ino}".encode()
        )
    return digest.hexdigest()[:24]


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

    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).upper() not in _SIZE:
        raise TracekitError(f"cache size {text!r} is not a size such as 5GB or 500MB")
    return int(float(match.group(1)) * _SIZE[match.group(2).upper()])


def cache_max() -> int:
    """The cache's size cap in bytes: $TRACEKIT_CACHE_MAX (default 5GB; 0: no cap)."""
    return parse_size(os.environ.get("TRACEKIT_CACHE_MAX") or DEFAULT_CACHE_MAX)


def _entry_bytes(path: Path) -> int:
    """Bytes of the cached database ``path`` with its write-ahead log."""
    return sum(file.stat().st_size for file in (path, path.with_name(path.name + ".wal")) if file.exists())


def _remove_entry(path: Path) -> None:
    """Delete the cached database ``path``, its write-ahead log, and the lock its build took (else
    one empty lock file per trace ever cached stayed behind). A process still waiting on that lock
    finds the database gone and builds it again: the build is renamed into place whole, so two
    builds of one entry waste time but never mix."""
    for file in (path, path.with_name(path.name + ".wal"), path.with_suffix(".lock")):
        file.unlink(missing_ok=True)


def cache_entries() -> list[dict]:
    """The cached databases, most recently used first: file, bytes, last use, the traces they hold."""
    folder = cache_dir()
    out = []
    for entry in folder.glob("*.duckdb") if folder.is_dir() else []:
        inputs: list[str] = []
        try:
            con = duckdb.connect(str(entry), read_only=True)
            try:
                row = con.execute("SELECT value FROM tracekit_info WHERE key = 'inputs'").fetchall()
                inputs = json.loads(row[0][0]) if row else []
            finally:
                con.close()
        except (duckdb.Error, ValueError, IndexError):
            inputs = []  # in use by a writer, or not a tracekit database: listed without its inputs
        last_used = entry.stat().st_mtime
        out.append({"file": entry.name, "size_bytes": _entry_bytes(entry), "last_used": last_used, "inputs": inputs})
    return sorted(out, key=lambda listed: -listed["last_used"])


def cache_clear(older_than_s: float | None = None) -> tuple[int, int]:
    """Delete cached databases (only those unused for ``older_than_s`` seconds when given):
    (files, bytes) removed."""
    folder = cache_dir()
    removed = freed = 0
    now = time.time()
    for entry in list(folder.glob("*.duckdb")) if folder.is_dir() else []:
        if older_than_s is not None and now - entry.stat().st_mtime < older_than_s:
            continue
        size = _entry_bytes(entry)
        _remove_entry(entry)
        removed, freed = removed + 1, freed + size
    return removed, freed


def evict(keep: Path | None = None) -> list[Path]:
    """Delete the least recently used cached databases until the cache fits ``cache_max()``
    (``keep``, the one just built, stays). Returns the files removed."""
    cap = cache_max()
    folder = cache_dir()
    if not cap or not folder.is_dir():
        return []
    entries = sorted(folder.glob("*.duckdb"), key=lambda entry: entry.stat().st_mtime)
    total = sum(_entry_bytes(entry) for entry in entries)
    removed = []
    for entry in entries:
        if total <= cap:
            break
        if keep is not None and entry.resolve() == keep.resolve():
            continue
        size = _entry_bytes(entry)
        try:
            _remove_entry(entry)
        except OSError:
            continue
        total -= size
        removed.append(entry)
    return removed
