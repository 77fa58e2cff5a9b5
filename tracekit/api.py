"""The Python API: ``tracekit.load`` / ``tracekit.open`` and the ``Trace`` object."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from tracekit.common import sqlmodules, sqlsafety
from tracekit.errors import QueryError, TraceFormatError, first_line
from tracekit.ingest.sources import discover
from tracekit.library import queries
from tracekit.model import critical_path
from tracekit.present.render import BATCH_ROWS
from tracekit.result import Result
from tracekit.schema.catalog import TABLES
from tracekit.store import database, pipeline, selection

if TYPE_CHECKING:
    import pyarrow as pa


# Tables and views the linked model creates.
LINKED_NAMES = pipeline.NAMES
_LINKED = {n.lower() for n in (*LINKED_NAMES, *pipeline.MACRO_NAMES)}
_LINKED_RE = re.compile(r"\b(" + "|".join(sorted(_LINKED)) + r")\b", re.IGNORECASE)


def _names(node, out: set) -> set:
    """Table names and string constants (``query_table('t')``) in a json_serialize_sql tree."""
    if isinstance(node, dict):
        if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
            out.add(node["table_name"].lower())
        if node.get("class") == "FUNCTION" and isinstance(node.get("function_name"), str):
            out.add(node["function_name"].lower())  # a macro over the linked tables
        if node.get("class") == "CONSTANT":
            for holder, key in (("value", "value"), ("literal", "text")):
                value = node.get(holder)
                if isinstance(value, dict) and isinstance(value.get(key), str):
                    out.add(value[key].lower())
        for v in node.values():
            _names(v, out)
    elif isinstance(node, list):
        for v in node:
            _names(v, out)
    return out


def needs_link(con: duckdb.DuckDBPyConnection, sql: str) -> bool:
    """Whether ``sql`` reads a linked table or view.

    DuckDB's parser names the tables a SELECT reads; any other statement
    (or one it cannot serialize) counts when a linked name appears in its
    text at all: linking when not needed costs time, not linking when
    needed would fail the query.
    """
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
    except (duckdb.Error, ValueError, TypeError):
        tree = {"error": True}
    if tree.get("error"):
        return bool(_LINKED_RE.search(sql))
    return bool(_names(tree, set()) & _LINKED)


def _reader(relation) -> pa.RecordBatchReader:
    """The rows of a DuckDB relation as Arrow batches; a statement without rows gives no columns."""
    import pyarrow as pa

    if relation is None:
        return pa.RecordBatchReader.from_batches(pa.schema([]), [])
    return relation.to_arrow_reader(BATCH_ROWS)


def _explain(message: str) -> str:
    """A DuckDB error message, with the way out when it is tracekit's file-access guard."""
    if "operations are disabled by configuration" in message:
        first, _, rest = message.partition("\n")
        return f"{first} (tracekit runs SQL without file access: --allow-files or TRACEKIT_ALLOW_FILES=1 allow it)" + (
            "\n" + rest if rest else ""
        )
    return message


class Trace:
    """Loaded traces: a DuckDB connection over the tracekit schema.

    ``con`` is the DuckDB connection for power users (with the linked
    tables built); ``sql`` and ``query`` return a ``Result`` (``.pl()``,
    ``.arrow()``, ``.df()``, ``.fetchall()``; it also answers as the polars
    DataFrame).

    A database fresh from ``load`` holds the events and base tables; the
    linked model is built the first time a query names one of its tables
    (``link()`` builds it at once) and, for a database file, written into
    it, so it is built once. A file that cannot be written gets it as
    TEMP tables of this connection.
    """

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        path: Path | None = None,
        read_only: bool = False,
        allow_files: bool | None = None,
        readable: tuple[Path, ...] = (),
    ):
        self._con = con
        # Folders SQL here may read even without allow_files: a Parquet dataset's own files.
        self._readable = readable
        self.path = path
        self._read_only = read_only
        # SQL run here (named queries, tracekit sql, trace.con) may not read or write files unless
        # allowed: see docs/safety.md.
        self.allow_files = files_allowed() if allow_files is None else allow_files
        critical_path.register(self._con)  # the Python function the critical-path queries call
        self._guard()
        self._linked: bool | None = None
        # Called with True before and False after a link step, e.g. to show a status line.
        self.on_link: Callable[[bool], None] | None = None
        # Called with the seconds waited while another process links the same file.
        self.on_wait: Callable[[float], None] | None = None
        # Inside memoized(): the query ids whose results are kept, and (id, parameters) -> TEMP table.
        self._memo_ids: frozenset[str] = frozenset()
        self._memo: dict[tuple[str, str], str] = {}

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection, with the linked tables built."""
        self.link()
        return self._con

    @property
    def selected(self) -> str | None:
        """What this trace holds of its source when opened with ``ranks``/``traces`` (``2 of 64 traces
        (--rank 0,3)``), else None."""
        rows = self._con.execute("SELECT value FROM tracekit_info WHERE key = 'selected'").fetchall()
        return rows[0][0] if rows else None

    @property
    def linked(self) -> bool:
        """Whether the linked tables exist yet."""
        if self._linked is None:
            self._linked = pipeline.is_built(self._con)
        return self._linked

    def link(self) -> Trace:
        """Build the linked tables now (a no-op when they exist)."""
        if self.linked:
            return self
        if self.on_link:
            self.on_link(True)
        try:
            self._link()
        finally:
            if self.on_link:
                self.on_link(False)
        return self

    def _link(self) -> None:
        if self.path is not None and self._read_only:
            # Closed first: a connection of this process would keep showing the file as it was.
            self._con.close()
            try:
                linked = database.link_file(self.path, waiting=self.on_wait)
            finally:
                self._con = duckdb.connect(str(self.path), read_only=True)
                critical_path.register(self._con)
                self._guard()
            if not linked or not pipeline.is_built(self._con):
                # Not writable by this process (or another connection of this process still holds the
                # file as it was): link for this connection only, under the same memory cap.
                limit = database.link_memory_limit(self._con)
                self._con.execute("SET memory_limit = ?", [limit])
                try:
                    pipeline.build(self._con, temp=True)
                except duckdb.OutOfMemoryException as exc:
                    raise database.out_of_memory(self.path, limit, exc, "linking it") from None
        else:
            pipeline.build(self._con)
        self._linked = True

    def _guard(self) -> None:
        """Turn DuckDB's file and network access off for this database unless allowed (one way)."""
        if not self.allow_files:
            if self._readable:
                dirs = [str(Path(d).resolve()) + "/" for d in self._readable]
                self._con.execute("SET allowed_directories = $dirs", {"dirs": dirs})
            self._con.execute("SET enable_external_access = false")

    def _connection_for(self, sql: str) -> duckdb.DuckDBPyConnection:
        """The connection to run ``sql`` on, linked first when it names a linked table; ``sql`` may not
        change a setting that protects the process (``sqlsafety.check_settings``)."""
        sqlsafety.check_settings(sql)
        if not self.linked and needs_link(self._con, sql):
            self.link()
        return self._con

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        where = str(self.path) if self.path else "in memory"
        count = self._con.execute("SELECT count(*) FROM traces").fetchall()[0][0]
        return f"<tracekit.Trace {count} trace(s), {where}>"

    def close(self) -> None:
        """Close the database connection."""
        self._con.close()

    def arrow(self, sql: str, params: Mapping[str, object] | None = None) -> pa.Table:
        """Run ``sql`` and return an Arrow table (``sql(...).arrow()`` without the wrapper)."""
        return self.batches(sql, params).read_all()

    def batches(self, sql: str, params: Mapping[str, object] | None = None) -> pa.RecordBatchReader:
        """Run ``sql`` and return its rows as a stream of Arrow record batches (memory stays flat;
        drain it before the next query on this trace)."""
        sqlsafety.statement_text(sql)
        try:
            return _reader(self._connection_for(sql).sql(sql, params=dict(params) if params else None))
        except duckdb.Error as exc:
            raise QueryError(_explain(str(exc).strip())) from None

    def rows(self, sql: str, params: Mapping[str, object] | None = None) -> list[tuple]:
        """Run ``sql`` and return its rows as tuples (no Arrow, no polars)."""
        try:
            return self._connection_for(sql).execute(sql, dict(params) if params else None).fetchall()
        except duckdb.Error as exc:
            raise QueryError(_explain(str(exc).strip())) from None

    def sql(self, sql: str, params: Mapping[str, object] | None = None) -> Result:
        """Run ``sql`` (``$name`` parameters from ``params``) and return a ``Result``."""
        return Result(self.arrow(sql, params))

    def query(self, name: str, params: Mapping[str, object] | None = None, /, *, query_dirs=(), **kw: object) -> Result:
        """Run a named query (see ``tracekit queries``) with checked parameters, given as a
        mapping, as keywords, or both: ``query("top_kernels", {"limit": 5})`` is
        ``query("top_kernels", limit=5)``. Returns a ``Result``."""
        named = queries.find(name, query_dirs)
        return Result(self.query_arrow(named.id, {**(params or {}), **kw}, query_dirs), named.id)

    def query_arrow(self, name: str, params: Mapping[str, object] | None = None, query_dirs=()) -> pa.Table:
        """Run a named query and return an Arrow table (``query(...).arrow()`` without the wrapper)."""
        return self.query_batches(name, params, query_dirs).read_all()

    def query_batches(
        self, name: str, params: Mapping[str, object] | None = None, query_dirs=()
    ) -> pa.RecordBatchReader:
        """Run a named query and return its rows as a stream of Arrow record batches."""
        named = queries.find(name, query_dirs)
        bound = named.bind(params or {})
        try:
            if not self._memo_ids:
                return _reader(self._connection_for(named.sql).sql(named.sql, params=bound or None))
            if named.id in self._memo_ids:
                sql, bound = f"SELECT * FROM {self._memoize(named, bound, query_dirs)}", {}
            else:
                sql, bound = self._memo_sql(named, bound, query_dirs)
            return _reader(self._connection_for(sql).sql(sql, params=bound or None))
        except duckdb.Error as exc:
            raise QueryError(_explain(f"query {named.id} ({named.path}) failed: {str(exc).strip()}")) from None

    @contextlib.contextmanager
    def memoized(self, names, query_dirs=()) -> Iterator[Trace]:
        """Within: the named queries' results are kept (TEMP tables, dropped on exit) for every later
        query that runs them, or ``@uses`` them, with the same parameters. For callers that run
        overlapping queries back to back: a report runs gpu_breakdown itself and through two
        findings, gpu_timeline through its headline, the findings and itself."""
        if self._memo_ids:  # nested: the outer scope keeps (and drops) its tables
            yield self
            return
        self._memo_ids = frozenset(queries.find(n, query_dirs).id for n in names)
        try:
            yield self
        finally:
            self._memo_ids = frozenset()
            tables, self._memo = list(self._memo.values()), {}
            for table in tables:
                self._con.execute(f"DROP TABLE IF EXISTS temp.{table}")

    def _memoize(self, named: queries.Query, bound: dict, query_dirs) -> str:
        """The TEMP table holding ``named``'s rows for ``bound`` (its own parameters), made on first use."""
        key = (named.id, repr(sorted(bound.items())))
        if key not in self._memo:
            sql, used = self._memo_sql(named, bound, query_dirs)
            table = f"_tracekit_memo_{len(self._memo)}"
            self._connection_for(sql).execute(f"CREATE TEMP TABLE {table} AS {sql}", used or None)
            self._memo[key] = table
        return self._memo[key]

    def _memo_sql(self, named: queries.Query, bound: dict, query_dirs) -> tuple[str, dict]:
        """``named``'s SQL with each kept query it ``@uses`` read from its table (made first), and the
        parameters that SQL still names."""
        sql = named.sql
        for name in named.uses:
            used_query = queries.find(name, query_dirs)
            inlined = queries.cte(used_query)  # as queries.resolve composed it
            if used_query.id in self._memo_ids and inlined in sql:
                table = self._memoize(
                    used_query, {key: bound[key] for key in used_query.params if key in bound}, query_dirs
                )
                sql = sql.replace(inlined, f'"{used_query.name}" AS (SELECT * FROM {table})')
        return sql, {k: v for k, v in bound.items() if re.search(rf"\${re.escape(k)}\b", sql)}

    def orphans(self) -> tuple[int, int]:
        """``(GPU ops, summed ns)`` launched before the trace began: what queries leave out by default."""
        # Linked, gpu_ops says it per row; the base view finds it with a subquery over every event,
        # which every command that prints the note would pay.
        source = "gpu_ops WHERE orphan" if self.linked else "gpu_op_events WHERE orphan"
        ops, ns = self.rows(f"SELECT count(*), coalesce(sum(dur_ns), 0) FROM {source}")[0]
        return int(ops), int(ns)

    def use_rules(self, rule_dirs) -> Trace:
        """Re-attribute stages with extra rule folders (their rows win over the shipped ones).

        Works on read-only databases too: the rule and attribution tables are
        rebuilt as TEMP tables for this connection only.
        """
        if not rule_dirs:
            return self
        self.link()
        try:
            pipeline.reattribute(self.con, rule_dirs)
        except duckdb.Error as exc:
            raise QueryError(
                f"re-attributing with {', '.join(map(str, rule_dirs))} failed: {str(exc).strip()}"
            ) from None
        return self

    def tables(self) -> list[dict]:
        """Tables and views of the database with their documented columns (linked ones included)."""
        self.link()
        rows = self.con.execute(sqlmodules.text("store/listed_tables")).fetchall()
        out = []
        for name, kind in rows:
            declared = TABLES.get(name)
            described = self.con.execute(f'DESCRIBE "{name}"').fetchall()
            documented = {column.name: column.doc for column in declared.columns} if declared else {}
            out.append(
                {
                    "table": name,
                    "kind": "view" if kind == "VIEW" else "table",
                    "doc": declared.doc if declared else "",
                    "columns": [
                        (column, column_type, documented.get(column, "")) for column, column_type, *_ in described
                    ],
                }
            )
        return out


def files_allowed() -> bool:
    """Whether SQL may read and write files: $TRACEKIT_ALLOW_FILES=1 (``tracekit --allow-files``)."""
    return os.environ.get("TRACEKIT_ALLOW_FILES", "").strip().lower() in ("1", "true", "yes")


def open(  # noqa: A001 - mirrors tracekit.open
    path, read_only: bool = True, allow_files: bool | None = None, ranks=None, traces=None
) -> Trace:
    """Open a database written by ``tracekit load``.

    ``allow_files=True`` lets SQL on it read and write files (DuckDB's
    external access); by default it is off (``files_allowed``). ``ranks``
    (ints, or text such as ``"0,3"`` or ``"0-7"``) and ``traces`` (labels,
    ``traces.trace``) keep only those traces: every table reads as the
    database's rows of those traces (``tracekit.store.selection``); the
    linked model, when the file lacks it, is then built in memory over them.
    """
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        first = first_line(exc)
        if _LOCKED.search(first):
            raise TraceFormatError(
                path,
                f"in use by another process that writes it (a load, or a Python session that opened it "
                f"read-write); retry when it is done ({first})",
            ) from None
        raise TraceFormatError(path, f"not a DuckDB database ({first})") from None
    database.check_version(con, path)
    select = selection.Selection.of(ranks, traces)
    if select:
        con.close()  # checked: the file is read through a connection of its own, attached
        return Trace(selection.open_database(path, select), None, allow_files=allow_files)
    return Trace(con, path, read_only=read_only, allow_files=allow_files)


def open_dataset(path, allow_files: bool | None = None, ranks=None, traces=None) -> Trace:
    """Open a Parquet dataset folder written by ``tracekit load --parquet`` (``tracekit.store.dataset``).

    ``ranks`` and ``traces`` keep only those traces, as for ``open``: the views read only their partitions.
    """
    from tracekit.store import dataset  # Parquet datasets only: not imported for a .duckdb

    con, folder = dataset.connect(path, selection.Selection.of(ranks, traces))
    return Trace(con, None, allow_files=allow_files, readable=(folder,))


# DuckDB's words for a file another process holds (not "lock" inside "block" of a corrupt file).
_LOCKED = re.compile(r"could not set lock on file|conflicting lock", re.IGNORECASE)


def is_database(path) -> bool:
    """True when ``path`` names a DuckDB file rather than a trace."""
    candidate = Path(path)
    return candidate.suffix in (".duckdb", ".db") and candidate.is_file()


def load(
    paths,
    output=None,
    cache: bool = False,
    progress=None,
    warn=None,
    memory_limit: str | None = None,
    link: bool = False,
    waiting: Callable[[float], None] | None = None,
    allow_files: bool | None = None,
    jobs: int = 1,
    ranks=None,
    traces=None,
) -> Trace:
    """Load trace files or directories (or open a ``.duckdb`` or a Parquet dataset folder) into a ``Trace``.

    ``output`` writes the database to that file (atomically); ``cache=True``
    reuses a database cached for the same unchanged inputs; otherwise the
    database lives in memory. ``memory_limit`` caps DuckDB's memory for a
    file build (default: scaled to the input, $TRACEKIT_MEMORY_LIMIT).
    ``link=True`` builds the linked tables now rather than on first use (with
    ``cache``, in the same pass as the load when the cache has no database yet).
    ``waiting(seconds)`` is called while another process builds the same cache entry.
    ``allow_files=True`` lets SQL read and write files (off by default; see ``open``).
    Several files written to ``output`` are one load task each (``parallel``),
    in ``jobs`` worker processes (1: in this process): a file that fails is
    reported and the others load (``parallel.PartialLoadError`` names the
    failures after ``output`` is written).
    ``ranks`` (ints, or text such as ``"0,3"`` or ``"0-7"``) and ``traces``
    (labels) keep only those traces of what is loaded or opened, every id as
    the whole gives it: a dataset's views then read only their partitions
    (``open``, ``open_dataset``); a rank or label missing is a ``TracekitError``.
    """
    select = {"ranks": ranks, "traces": traces}
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    if len(paths) == 1 and output is None and (Path(paths[0]) / "tracekit_dataset.json").is_file():
        trace = open_dataset(paths[0], allow_files=allow_files, **select)  # a folder written by load --parquet
        return trace.link() if link else trace
    if len(paths) == 1 and is_database(paths[0]) and output is None:
        trace = open(paths[0], allow_files=allow_files, **select)
        return trace.link() if link else trace
    if output is not None and len(discover(paths)) > 1:
        from tracekit.store import parallel

        return open(
            parallel.build_file(
                paths, Path(output), jobs=jobs, progress=progress, warn=warn, memory_limit=memory_limit, linked=link
            ),
            allow_files=allow_files,
            **select,
        )
    if output is not None:
        return open(
            database.build_file(
                paths, Path(output), progress=progress, warn=warn, memory_limit=memory_limit, linked=link
            ),
            allow_files=allow_files,
            **select,
        )
    if cache:
        return open(
            database.cached_build(paths, progress=progress, warn=warn, linked=link, waiting=waiting),
            allow_files=allow_files,
            **select,
        )
    con = duckdb.connect()
    database.build(con, discover(paths), progress=progress, warn=warn, linked=link)
    if selection.Selection.of(ranks, traces):
        try:
            selection.select_in_memory(con, selection.Selection.of(ranks, traces), ", ".join(map(str, paths)))
        except BaseException:
            con.close()
            raise
    return Trace(con, None, allow_files=allow_files)
