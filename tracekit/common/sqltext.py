"""SQL text built from Python values: the one place that quotes them.

Values that come from the user or the environment are bound as parameters,
never pasted into SQL; what is pasted here is tracekit's own vocabulary (kinds,
stages, JSON specs), staged file paths and rule patterns (a regex pasted as a
literal is compiled once per query, not once per row), quoted by one function.
"""

from __future__ import annotations

from collections.abc import Iterable

import duckdb


def literal(value: str) -> str:
    """A SQL string literal: ``'it''s'``."""
    return "'" + str(value).replace("'", "''") + "'"


def in_list(values: Iterable[str]) -> str:
    """A parenthesised list of string literals, for ``x IN (...)``."""
    return "(" + ", ".join(literal(v) for v in values) + ")"


def constant(value: object) -> str:
    """``value`` as a DuckDB constant: None ``NULL``, a bool ``true`` or ``false``, an int, a string quoted, a
    list ``[...]`` and a dict with string keys a struct ``{'key': ...}``, of these (``read_json``'s ``columns``).
    Anything else (a float, whose text need not be its value) is an error."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value) if isinstance(value, int) else literal(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(constant(v) for v in value) + "]"
    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
        return "{" + ", ".join(f"{literal(k)}: {constant(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"not a constant tracekit writes into SQL: {value!r}")


INSERT_ROWS = 500  # rows per bound INSERT (DuckDB binds a statement's parameters one by one)


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: Iterable[Iterable]) -> None:
    """Insert ``rows`` (tuples of one width) into ``table``: one bound ``INSERT ... VALUES (?, ?), (?, ?)``
    per ``INSERT_ROWS`` rows. ``executemany`` runs one statement per row, each with a statement's
    fixed cost, and a commit each outside a transaction."""
    values = [tuple(r) for r in rows]
    for at in range(0, len(values), INSERT_ROWS):
        chunk = values[at : at + INSERT_ROWS]
        row = "(" + ", ".join("?" * len(chunk[0])) + ")"
        con.execute(f"INSERT INTO {table} VALUES {', '.join([row] * len(chunk))}", [v for r in chunk for v in r])
