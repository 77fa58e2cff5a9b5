"""Some ranks or traces of a source: ``--rank 0,3`` / ``--trace LABEL``, ``tracekit.load(..., ranks=, traces=)``.

A selection keeps the traces whose rank is listed and (when both are given)
whose label (``traces.trace``) is listed. It gives the rows a full open gives,
filtered to those traces, ids included (nothing is renumbered), so a query
answers alike over a Parquet dataset and a ``.duckdb`` of the same traces:

- a dataset's views read only the chosen traces' partitions (the files listed
  rather than the folder's glob: ``dataset.connect``);
- a ``.duckdb`` (or the cache's, or an in-memory load) is read through views
  that filter every per-trace table on ``trace_id`` (``database_views``), in a
  catalog of their own that the connection then uses. Its linked model, when
  the file holds it, is read the same way; else it is built on first use, in
  memory, over the chosen traces only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import duckdb

from tracekit.common.sqltext import literal
from tracekit.errors import TracekitError
from tracekit.ingest import events_table
from tracekit.schema import catalog
from tracekit.store import database, pipeline

# The catalogs: a database file attached to the connection of its views; an in-memory load's views.
SOURCE = "tracekit_source"
SELECTED = "tracekit_selected"
_SHOWN = 16  # labels listed in an error before '...'


@dataclass(frozen=True)
class Selection:
    """The ranks and trace labels to keep; empty keeps everything."""

    ranks: tuple[int, ...] = ()
    traces: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.ranks or self.traces)

    @classmethod
    def of(cls, ranks: Iterable[int] | int | str | None = None, traces: Iterable[str] | str | None = None) -> Selection:
        """A selection from ranks (ints, or text as ``--rank`` takes it: ``0,3``, ``0-7``) and labels."""
        if isinstance(ranks, str):
            ranks = parse_ranks(ranks)
        elif isinstance(ranks, int):
            ranks = [ranks]
        if isinstance(traces, str):
            traces = [traces]
        return cls(tuple(sorted(set(int(r) for r in ranks or ()))), tuple(dict.fromkeys(traces or ())))

    def describe(self) -> str:
        """The selection as the options that give it: ``--rank 0,3 --trace a``."""
        parts = [f"--rank {ranges(self.ranks)}"] if self.ranks else []
        parts += [f"--trace {label}" for label in self.traces]
        return " ".join(parts)


def parse_ranks(text: str) -> tuple[int, ...]:
    """Ranks from ``0,3``, ``0-7`` or ``0-3,8``: sorted, each once."""
    ranks: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        low, dash, high = item.partition("-")
        try:
            if dash and low:
                first, last = int(low), int(high)
                if last < first:
                    raise ValueError
                ranks.update(range(first, last + 1))
            else:
                ranks.add(int(item))
        except ValueError:
            raise TracekitError(f"--rank {text!r}: want ranks as 0,3 or 0-7 (numbers from 0)") from None
        if min(ranks) < 0:
            raise TracekitError(f"--rank {text!r}: want ranks as 0,3 or 0-7 (numbers from 0)")
    return tuple(sorted(ranks))


def ranges(numbers: Iterable[int]) -> str:
    """``0-3,8``: runs of consecutive numbers as ranges."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(set(numbers)):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [n]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def choose(rows: Sequence[tuple[int, str, int | None]], selection: Selection, source) -> list[int]:
    """The trace ids ``selection`` keeps of ``rows`` (trace_id, label, rank); a rank or label that no trace
    of ``source`` has is an error naming the source and what it holds."""
    present = sorted({rank for _, _, rank in rows if rank is not None})
    missing = [r for r in selection.ranks if r not in present]
    if missing:
        held = f"ranks present: {ranges(present)}" if present else "no trace records a rank"
        word = "rank" if len(missing) == 1 else "ranks"
        raise TracekitError(f"{source}: no {word} {ranges(missing)} ({held})")
    labels = [label for _, label, _ in rows]
    unknown = [label for label in selection.traces if label not in labels]
    if unknown:
        shown = ", ".join(labels[:_SHOWN]) + (f", ... ({len(labels)} in all)" if len(labels) > _SHOWN else "")
        raise TracekitError(f"{source}: no trace labelled {', '.join(map(repr, unknown))} (traces: {shown})")
    chosen = sorted(
        trace_id
        for trace_id, label, rank in rows
        if (not selection.ranks or rank in selection.ranks) and (not selection.traces or label in selection.traces)
    )
    if not chosen:
        by_rank, by_label = Selection(ranks=selection.ranks).describe(), Selection(traces=selection.traces).describe()
        raise TracekitError(f"{source}: no trace matches both {by_rank} and {by_label}")
    return chosen


def database_views(con: duckdb.DuckDBPyConnection, source: str, chosen: Sequence[int]) -> None:
    """Views in ``con``'s current catalog over every table of its catalog ``source`` (a database's), the
    per-trace ones filtered to the traces ``chosen``, and the views and macros a load creates over them (the
    linked model's when the database holds it)."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' ORDER BY table_name",
        [source],
    ).fetchall()
    info = f'"{source}".main.tracekit_info'
    linked = con.execute(f"SELECT value FROM {info} WHERE key = 'linked'").fetchall() == [("true",)]
    ids = ", ".join(str(int(t)) for t in chosen)
    for (table,) in rows:
        origin = f'"{source}".main."{table}"'
        if table == "tracekit_info":  # a table of its own: linking over the selection records itself here
            con.execute(f"CREATE TABLE tracekit_info AS SELECT * FROM {origin}")
        elif table in catalog.TABLES and catalog.per_trace(table):
            con.execute(f'CREATE VIEW "{table}" AS SELECT * FROM {origin} WHERE trace_id IN ({ids})')
        else:
            con.execute(f'CREATE VIEW "{table}" AS SELECT * FROM {origin}')
    events_table.phase_views(con)
    database.create_views(con)
    if linked:
        pipeline.adopt(con, comment=False)


def record(con: duckdb.DuckDBPyConnection, select: Selection, chosen: Sequence[int], total: int) -> None:
    """Say in ``tracekit_info`` (key ``selected``) what the connection holds of its source."""
    con.execute(
        "INSERT INTO tracekit_info VALUES ('selected', ?)", [f"{len(chosen)} of {total} traces ({select.describe()})"]
    )


def open_database(path, select: Selection) -> duckdb.DuckDBPyConnection:
    """An in-memory connection that reads the database file ``path`` (attached read-only) through views of
    only the traces ``select`` keeps (``database_views``)."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH {literal(str(path))} AS {SOURCE} (READ_ONLY)")
        _select(con, SOURCE, select, path)
    except BaseException:
        con.close()
        raise
    return con


def select_in_memory(con: duckdb.DuckDBPyConnection, select: Selection, source) -> None:
    """Make ``con``, an in-memory load's, read only the traces ``select`` keeps: the views in a catalog of
    their own, used from now on."""
    loaded = con.execute("SELECT current_database()").fetchall()[0][0]
    con.execute(f"ATTACH ':memory:' AS {SELECTED}")
    con.execute(f"USE {SELECTED}")
    _select(con, loaded, select, source)


def _select(con: duckdb.DuckDBPyConnection, catalog_name: str, select: Selection, source) -> None:
    traces = f'"{catalog_name}".main.traces'
    rows = [tuple(row) for row in con.execute(f"SELECT trace_id, trace, rank FROM {traces} ORDER BY 1").fetchall()]
    chosen = choose(rows, select, source)
    database_views(con, catalog_name, chosen)
    record(con, select, chosen, len(rows))
