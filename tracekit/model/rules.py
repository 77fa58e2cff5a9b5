"""Rule tables: classification patterns kept as data, not code.

Each ``<name>.csv`` in the shipped ``tracekit/rules/`` folder becomes the
table ``rule_<name>`` in every database; queries and attribution join them.
Users extend a rule table without touching Python: a CSV of the same name
(same columns) in a folder given by ``--rules DIR`` or ``$TRACEKIT_RULES_PATH``
is read *before* the shipped one, so its rows win. Every row gets
``rule_order`` (its rank: lower wins) and ``rule_file``.

Patterns are RE2 regular expressions as DuckDB's ``regexp_matches`` reads
them; prefix ``(?i)`` for case-insensitive matching.
"""

from __future__ import annotations

import csv
import difflib
import os
import re
from pathlib import Path

import duckdb

from tracekit.common import resources
from tracekit.common.sqltext import insert_rows
from tracekit.errors import TracekitError
from tracekit.schema import stages

SHIPPED = resources.data_dir("tracekit.rules")


def search_path(extra_dirs=()) -> list[Path]:
    """Rule folders, highest priority first: --rules dirs, $TRACEKIT_RULES_PATH, shipped."""
    dirs = [Path(d) for d in extra_dirs]
    dirs += [Path(d) for d in os.environ.get("TRACEKIT_RULES_PATH", "").split(os.pathsep) if d]
    for d in dirs:
        if not d.is_dir():
            raise TracekitError(f"{d}: rules folder does not exist")
    return [*dirs, SHIPPED]


def _check_stage(path: Path, line: int, stage: str, allowed: set[str]) -> None:
    """A user rule's stage is one of the vocabulary's (capture/stages.csv) or a value the shipped table uses
    (a placeholder such as proj, or a \\1 back-reference); else an error naming the file and row."""
    if stage in allowed or re.fullmatch(r"(\\[0-9])+", stage):
        return
    close = difflib.get_close_matches(stage, sorted(allowed - {""}), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise TracekitError(
        f"{path}:{line}: unknown stage {stage!r} ({hint}stages: {', '.join(stages.names())}; "
        "a new stage is a row of capture/stages.csv first)"
    )


def _read(path: Path, columns: list[str] | None, stages_allowed: set[str] | None = None) -> list[dict]:
    rows: list[tuple[int, dict]] = []
    # utf-8-sig: Excel's "CSV UTF-8" starts with a byte-order mark.
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        for row in reader:
            # csv fills a short row's missing fields with None and files a long row's
            # extras under None: either way a comma in a field was not quoted.
            if None in row or None in row.values():
                raise TracekitError(
                    f"{path}:{reader.line_num}: row does not have the header's {len(header)} "
                    "fields (quote a field that holds a comma)"
                )
            if any(v.strip() for v in row.values()):
                rows.append((reader.line_num, row))
    if columns is not None and rows and header != columns:
        raise TracekitError(f"{path}: columns {header} differ from the shipped rule table's {columns}")
    for i, row in rows:
        if stages_allowed is not None and row.get("stage") is not None:
            _check_stage(path, i, row["stage"].strip(), stages_allowed)
        pattern = row.get("pattern")
        if pattern is not None:
            try:
                re.compile(pattern.replace("(?i)", ""))
            except re.error as exc:
                raise TracekitError(f"{path}:{i}: bad pattern {pattern!r}: {exc}") from None
    return [row for _, row in rows]


def names() -> list[str]:
    """The rule tables' names without ``rule_``: one per shipped CSV."""
    return sorted(p.stem for p in SHIPPED.glob("*.csv"))


def load(con: duckdb.DuckDBPyConnection, extra_dirs=(), temp: bool = False) -> list[str]:
    """Create the ``rule_*`` tables (as TEMP tables to shadow a read-only database's)."""
    names_ = names()
    dirs = search_path(extra_dirs)
    for d in dirs[:-1]:
        for path in d.glob("*.csv"):
            if path.stem not in names_:
                raise TracekitError(f"{path}: no rule table named {path.stem!r} (known: {', '.join(names_)})")
    for name in names_:
        shipped_rows = _read(SHIPPED / f"{name}.csv", None)
        columns = list(shipped_rows[0]) if shipped_rows else []
        allowed = set(stages.names()) | {r["stage"] for r in shipped_rows if "stage" in r}
        rows: list[tuple] = []
        for d in dirs:
            path = d / f"{name}.csv"
            if path.is_file():
                rows += [
                    (*[r[c] for c in columns], str(path))
                    for r in (_read(path, columns, allowed) if d != SHIPPED else shipped_rows)
                ]
        cols = ", ".join(f'"{c}" VARCHAR' for c in columns)
        kind = "TEMP TABLE" if temp else "TABLE"
        con.execute(f"CREATE OR REPLACE {kind} rule_{name} ({cols}, rule_file VARCHAR, rule_order INTEGER)")
        insert_rows(con, f"rule_{name}", ((*r, i) for i, r in enumerate(rows, start=1)))
    return names_
