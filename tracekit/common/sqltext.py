"""SQL text built from Python values: the one place that quotes them.

Values that come from the user or the environment are bound as parameters,
never pasted into SQL; what is pasted here is tracekit's own vocabulary (kinds,
stages, JSON specs), staged file paths and rule patterns (a regex pasted as a
literal is compiled once per query, not once per row), quoted by one function.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb


def literal(value: str) -> str:
    """A SQL string literal: ``'it''s'``."""
    return "'" + str(value).replace("'", "''") + "'"


def in_list(values: Iterable[str]) -> str:
    """A parenthesised list of string literals, for ``x IN (...)``."""
    return "(" + ", ".join(literal(v) for v in values) + ")"


def json_literal(value: object) -> str:
    """A JSON value as a SQL string literal (json_transform specs)."""
    return literal(json.dumps(value))


def values_rows(rows: Iterable[Iterable[str]]) -> str:
    """Rows of string literals for a ``VALUES`` list: ``('a', 'b'), ('c', 'd')``."""
    return ", ".join("(" + ", ".join(literal(v) for v in row) + ")" for row in rows)


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


@dataclass(frozen=True)
class Macro:
    """Shared SQL the queries call (documented in docs/schema.md; usable in your own queries)."""

    name: str
    args: str
    doc: str
    sql: str
    table: bool = False  # a table macro (FROM name(...)) rather than a scalar one

    def create(self, temp: bool = False) -> str:
        """The CREATE statement."""
        kind = "TEMP MACRO" if temp else "MACRO"
        body = f"TABLE {self.sql}" if self.table else f"({self.sql})"
        return f"CREATE OR REPLACE {kind} {self.name}({self.args}) AS {body}"


def pattern_hits(con: duckdb.DuckDBPyConnection, rules: str, names: str, subject: str) -> str:
    """SQL: (``subject``, pattern) for each distinct subject of ``names`` and each pattern of ``rules`` it matches.

    Each pattern is written as a literal, so DuckDB compiles it once rather than
    once per (subject, rule) pair as a join on ``regexp_matches(subject, r.pattern)`` does.
    """
    patterns = [p for (p,) in con.execute(f"SELECT DISTINCT pattern FROM {rules} WHERE pattern IS NOT NULL").fetchall()]
    if not patterns:
        return f"SELECT NULL::VARCHAR AS {subject}, NULL::VARCHAR AS pattern WHERE false"
    return " UNION ALL ".join(
        f"SELECT {subject}, {literal(p)} AS pattern FROM (SELECT DISTINCT {subject} FROM {names}) "
        f"WHERE regexp_matches({subject}, {literal(p)})"
        for p in patterns
    )


def first_match(
    con: duckdb.DuckDBPyConnection,
    table: str,
    names: str,
    rules: str,
    fields: str,
    subject: str = "n.name",
    on: str = "",
) -> None:
    """``table`` (name, m): the first matching rule (lowest rule_order) of ``rules`` per distinct name of ``names``.

    ``subject`` is what a pattern sees (SQL over ``n``, a row of ``names``); ``fields`` the struct ``m`` holds
    besides ``rule`` (SQL over ``n`` and ``r``); ``on`` further join conditions (``AND ...``).
    Matching the few distinct names, not the many rows, keeps regexes cheap.
    """
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE {table} AS
            WITH n AS MATERIALIZED (SELECT n.*, {subject} AS _subject FROM ({names}) n),
            h AS ({pattern_hits(con, rules, "n", "_subject")})
            SELECT name, arg_min(m, o) AS m FROM (
                SELECT n.name, r.rule_order AS o, struct_pack({fields}, rule := r.pattern) AS m
                FROM n JOIN h USING (_subject) JOIN {rules} r ON r.pattern = h.pattern {on}
            ) GROUP BY name"""
    )
