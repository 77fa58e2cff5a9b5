"""Values from the user or the environment that reach DuckDB: checked here first.

Query parameters are bound (``queries.Query.bind``); settings such as the
memory cap cannot be bound in a ``SET``, so they are validated against a
strict form and passed as connection configuration, never pasted into SQL.
"""

from __future__ import annotations

import re

from tracekit.errors import TracekitError

# DuckDB's size syntax: a number and a unit (KB, MiB, GB, ...), or a percentage of RAM.
_SIZE = re.compile(r"^\s*(\d+(\.\d+)?)\s*(B|[KMGT]i?B|%)?\s*$", re.IGNORECASE)


def memory_limit(value: str, origin: str) -> str:
    """``value`` as a DuckDB memory limit (e.g. ``4GB``, ``512MiB``, ``50%``), or a one-line error naming ``origin``."""
    text = str(value)
    m = _SIZE.match(text)
    if not m or float(m.group(1)) <= 0:
        raise TracekitError(f"{origin}={text!r}: expected a size such as 4GB, 512MB or 50%")
    return text.strip().replace(" ", "")


def statement_text(sql: str) -> str:
    """``sql`` if it holds a statement; a one-line error for empty text or only ``;``."""
    if not re.sub(r"(--[^\n]*|/\*.*?\*/|[\s;])", "", sql or "", flags=re.DOTALL):
        raise TracekitError('the SQL text is empty: give a statement such as "SELECT count(*) FROM events"')
    return sql
