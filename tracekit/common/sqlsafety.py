"""Values from the user or the environment that reach DuckDB: checked here first.

Query parameters are bound (``queries.Query.bind``); settings such as the
memory cap cannot be bound in a ``SET``, so they are validated against a
strict form and passed as connection configuration, never pasted into SQL.
"""

from __future__ import annotations

import re

from tracekit.errors import QueryError, TracekitError

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


# Settings that protect the process and the machine: the memory cap, the threads, file and network access,
# where DuckDB spills and what extensions it may load. User SQL (``tracekit sql``, ``Trace.sql``, named queries)
# may not change them: tracekit sets them, and the environment or the command line change them.
PROTECTED_SETTINGS = frozenset(
    {
        "memory_limit", "max_memory", "threads", "worker_threads", "external_threads",
        "enable_external_access", "allowed_directories", "allowed_paths", "lock_configuration",
        "temp_directory", "max_temp_directory_size", "extension_directory", "allow_unsigned_extensions",
        "allow_community_extensions", "autoinstall_known_extensions", "autoload_known_extensions",
        "custom_extension_repository", "autoinstall_extension_repository", "enable_http_metadata_cache",
    }
)  # fmt: skip
_SETTING = re.compile(
    r"^(?:SET|RESET|PRAGMA)\s+(?:(?:GLOBAL|SESSION|LOCAL)\s+)?(?P<variable>VARIABLE\s+)?\"?(?P<name>[\w.]+)",
    re.IGNORECASE,
)
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)


def check_settings(sql: str) -> None:
    """Refuse ``sql`` that changes a protected setting (``SET memory_limit``, ``PRAGMA threads=1``,
    ``RESET threads``): one line naming the setting and the way to change it instead."""
    if not re.search(r"\b(set|reset|pragma)\b", sql, re.IGNORECASE):
        return
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return  # the run reports the parser's error
    for statement in statements:
        if statement.type not in (duckdb.StatementType.SET, duckdb.StatementType.PRAGMA):
            continue
        text = _COMMENTS.sub(" ", statement.query).strip()
        m = _SETTING.match(text)
        if m and m["variable"]:
            continue  # SET VARIABLE: the user's own value
        name = (m["name"] if m else "").lower()
        if statement.type == duckdb.StatementType.PRAGMA and name not in PROTECTED_SETTINGS:
            continue  # PRAGMA table_info(...) and the like
        if not m or name in PROTECTED_SETTINGS:
            raise QueryError(
                f"SQL may not change the setting {name or text.split()[0]!r}: tracekit sets it to protect the "
                "process (use --memory-limit or TRACEKIT_MEMORY_LIMIT for the memory cap, --allow-files for file access)"
            )
