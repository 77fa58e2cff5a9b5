"""The Python API: ``tracekit.load`` / ``tracekit.open`` and the ``Trace`` object."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from . import attribution, database, link, queries, rules
from .errors import QueryError, TraceFormatError
from .schema import TABLES
from .sources import discover

if TYPE_CHECKING:
    import pyarrow as pa
    import polars


def _polars():
    # Imported on first use: the CLI renders Arrow tables and starts faster without it.
    import polars

    return polars


class Trace:
    """Loaded traces: a DuckDB connection over the tracekit schema.

    ``con`` is the DuckDB connection for power users; ``sql`` and ``query``
    return polars DataFrames.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path | None = None):
        self.con = con
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        where = str(self.path) if self.path else "in memory"
        n = self.con.execute("SELECT count(*) FROM traces").fetchall()[0][0]
        return f"<tracekit.Trace {n} trace(s), {where}>"

    def close(self) -> None:
        """Close the database connection."""
        self.con.close()

    def arrow(self, sql: str, params: dict | None = None) -> pa.Table:
        """Run ``sql`` and return an Arrow table."""
        try:
            return self.con.sql(sql, params=params or None).to_arrow_table()
        except duckdb.Error as exc:
            raise QueryError(str(exc).strip()) from None

    def sql(self, sql: str, params: dict | None = None) -> "polars.DataFrame":
        """Run ``sql`` and return a polars DataFrame."""
        return _polars().from_arrow(self.arrow(sql, params))

    def query(self, name: str, query_dirs=(), **params) -> "polars.DataFrame":
        """Run a named query (see ``tracekit queries``) with checked parameters."""
        return _polars().from_arrow(self.query_arrow(name, params, query_dirs))

    def query_arrow(self, name: str, params: dict | None = None, query_dirs=()) -> pa.Table:
        """Run a named query and return an Arrow table."""
        q = queries.find(name, query_dirs)
        bound = q.bind(params or {})
        try:
            return self.con.sql(q.sql, params=bound or None).to_arrow_table()
        except duckdb.Error as exc:
            raise QueryError(f"query {q.id} ({q.path}) failed: {str(exc).strip()}") from None

    def use_rules(self, rule_dirs) -> "Trace":
        """Re-attribute stages with extra rule folders (their rows win over the shipped ones).

        Works on read-only databases too: the rule and attribution tables are
        rebuilt as TEMP tables for this connection only.
        """
        if not rule_dirs:
            return self
        try:
            rules.load(self.con, rule_dirs, temp=True)
            link.nest(self.con)
            attribution.build(self.con, temp=True)
            link.drop_work(self.con)
        except duckdb.Error as exc:
            raise QueryError(f"re-attributing with {', '.join(map(str, rule_dirs))} failed: {str(exc).strip()}") from None
        return self

    def tables(self) -> list[dict]:
        """Tables and views of the database with their documented columns."""
        rows = self.con.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = 'main' AND table_catalog = current_database() "
            "AND table_name NOT LIKE '\\_%' ESCAPE '\\' ORDER BY table_name"
        ).fetchall()
        out = []
        for name, kind in rows:
            doc = TABLES.get(name)
            cols = self.con.execute(f'DESCRIBE "{name}"').fetchall()
            documented = {c.name: c.doc for c in doc.columns} if doc else {}
            out.append(
                {
                    "table": name,
                    "kind": "view" if kind == "VIEW" else "table",
                    "doc": doc.doc if doc else "",
                    "columns": [(c[0], c[1], documented.get(c[0], "")) for c in cols],
                }
            )
        return out


def open(path, read_only: bool = True) -> Trace:  # noqa: A001 - mirrors tracekit.open in the docs
    """Open a database written by ``tracekit load``."""
    path = Path(path)
    if not path.exists():
        raise TraceFormatError(path, "no such file")
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise TraceFormatError(path, f"not a DuckDB database ({str(exc).strip().splitlines()[0]})") from None
    database.check_version(con, path)
    return Trace(con, path)


def is_database(path) -> bool:
    """True when ``path`` names a DuckDB file rather than a trace."""
    p = Path(path)
    return p.suffix in (".duckdb", ".db") and p.is_file()


def load(paths, output=None, cache: bool = False, progress=None, warn=None, memory_limit: str | None = None) -> Trace:
    """Load trace files or directories (or open a ``.duckdb``) into a ``Trace``.

    ``output`` writes the database to that file (atomically); ``cache=True``
    reuses a database cached for the same unchanged inputs; otherwise the
    database lives in memory. ``memory_limit`` caps DuckDB's memory for a
    file build (default: scaled to the input, $TRACEKIT_MEMORY_LIMIT).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    if len(paths) == 1 and is_database(paths[0]) and output is None:
        return open(paths[0])
    if output is not None:
        return open(database.build_file(paths, Path(output), progress=progress, warn=warn, memory_limit=memory_limit))
    if cache:
        return open(database.cached_build(paths, progress=progress, warn=warn))
    con = duckdb.connect()
    database.build(con, discover(paths), progress=progress, warn=warn)
    return Trace(con, None)
