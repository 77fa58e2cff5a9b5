"""The step runner: the model's SQL lives in ``.sql`` modules; Python orders them and binds their parameters.

A module is a file ``tracekit/<package>/sql/<name>.sql``, named ``<package>/<name>`` (``model/axis``). It
starts with a header, as the named queries do, then holds one or more statements, each ending with ``;`` at
the end of a line::

    -- Every CPU slice on one integer axis, threads far apart.
    --
    -- Why and how, in as many lines as it takes.
    --
    -- @param spread INT               Distance between two threads' stretches of the axis.
    -- @param kinds LIST               The kinds of slice nested.
    -- @param table KEYWORD(TABLE|TEMP TABLE)  What the step creates.
    -- @reads slices, _lanes
    -- @creates _cpu                   Every CPU slice with its lane and position (private).
    CREATE TEMP TABLE _cpu AS SELECT ... {{spread}} ... WHERE kind IN {{kinds}};

``{{name}}`` is where a parameter goes, written by its type: ``INT`` an integer, ``TEXT`` a quoted string,
``LIST`` a parenthesised list of quoted strings, ``IDENT`` a plain identifier, ``KEYWORD(A|B)`` one of the
words listed. A parameter that is declared and not used, used and not declared, or missing or extra in a
call is an error naming the file (and the line, for a declaration). Values are tracekit's own vocabulary
and numbers, never the user's text (that is bound by DuckDB, see ``sqlsafety``).

``@creates`` names what a module leaves behind (made, or replaced). Names that start with ``_`` are private working tables: the
build drops them all when it ends (``drop_private``), and ``docs/architecture.md`` lists them. A test runs
every build with ``CHECK`` on, which verifies after each module that it created what it declares and
nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import duckdb

from tracekit.common import resources, sqltext

# Packages whose sql/ folder holds modules.
PACKAGES = ("model", "attribution", "store")

_PARAM = re.compile(r"^--\s*@param\s+(\w+)\s+(INT|TEXT|LIST|IDENT|KEYWORD\(([^)]*)\))\s*(.*)$")
_CREATES = re.compile(r"^--\s*@creates\s+(\w+)\s*(.*)$")
_READS = re.compile(r"^--\s*@reads\s+(.*)$")
_SLOT = re.compile(r"\{\{(\w+)\}\}")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Tests set this: after each module, check that it created exactly what it declares.
CHECK = False


@dataclass(frozen=True)
class Param:
    """A declared parameter: its name, type, allowed words (KEYWORD) and doc."""

    name: str
    type: str
    words: tuple[str, ...]
    doc: str
    line: int


@dataclass(frozen=True)
class Module:
    """One parsed ``.sql`` module."""

    name: str
    path: Path
    title: str
    doc: str
    params: dict[str, Param]
    reads: tuple[str, ...]
    creates: dict[str, str]
    statements: tuple[str, ...]

    def render(self, values: dict[str, object]) -> list[str]:
        """The statements with ``values`` written in, checked against the declarations."""
        missing = sorted(set(self.params) - set(values))
        extra = sorted(set(values) - set(self.params))
        if missing or extra:
            said = "; ".join(
                s
                for s in (
                    f"missing {', '.join(missing)}" if missing else "",
                    f"undeclared {', '.join(extra)}" if extra else "",
                )
                if s
            )
            raise ValueError(f"{self.path}: parameters do not match the header ({said})")
        text = {name: _write(self.params[name], value, self.path) for name, value in values.items()}
        return [_SLOT.sub(lambda m: text[m.group(1)], s) for s in self.statements]


def _write(param: Param, value: object, path: Path) -> str:
    """The SQL text of ``value`` for ``param``."""
    where = f"{path}:{param.line}: parameter {param.name}"
    if param.type == "INT":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{where} must be an int, got {value!r}")
        return str(value)
    if param.type == "TEXT":
        return sqltext.literal(str(value))
    if param.type == "LIST":
        values = list(value)  # type: ignore[call-overload]
        if not values:
            raise ValueError(f"{where} must not be an empty list")
        return sqltext.in_list(values)
    if param.type == "IDENT":
        if not isinstance(value, str) or not _IDENT.match(value):
            raise ValueError(f"{where} must be a plain identifier, got {value!r}")
        return value
    if value not in param.words:
        raise ValueError(f"{where} must be one of {', '.join(param.words)}, got {value!r}")
    return str(value)


def parse(path: Path, name: str) -> Module:
    """Parse the module at ``path``; an error names the file and line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header: list[str] = []
    at = 0
    while at < len(lines) and lines[at].startswith("--"):
        header.append(lines[at])
        at += 1
    if not header or not header[0][2:].strip():
        raise ValueError(f"{path}:1: a module starts with a '-- title' line")
    params: dict[str, Param] = {}
    creates: dict[str, str] = {}
    reads: list[str] = []
    doc: list[str] = []
    for number, line in enumerate(header, start=1):
        if not line[2:].strip().startswith("@"):
            doc.append(line[2:].strip())
            continue
        if m := _PARAM.match(line):
            words = tuple(w.strip() for w in (m.group(3) or "").split("|") if w.strip())
            kind = "KEYWORD" if m.group(2).startswith("KEYWORD") else m.group(2)
            params[m.group(1)] = Param(m.group(1), kind, words, m.group(4), number)
        elif m := _CREATES.match(line):
            creates[m.group(1)] = m.group(2)
        elif m := _READS.match(line):
            reads += [r.strip() for r in m.group(1).split(",") if r.strip()]
        else:
            raise ValueError(f"{path}:{number}: unknown header line {line!r} (@param, @reads, @creates)")
    body = "\n".join(lines[at:])
    used = set(_SLOT.findall(body))
    for p in params.values():
        if p.name not in used:
            raise ValueError(f"{path}:{p.line}: parameter {p.name} is declared and not used")
    for u in sorted(used - set(params)):
        raise ValueError(f"{path}: {{{{{u}}}}} is used and not declared (-- @param {u} TYPE doc)")
    statements = tuple(s.strip() for s in re.split(r";[ \t]*(?:\n|$)", body) if s.strip())
    if not statements:
        raise ValueError(f"{path}: no statement after the header")
    title = doc[0]
    return Module(name, path, title, "\n".join(doc[1:]).strip(), params, tuple(reads), creates, statements)


@cache
def module(name: str) -> Module:
    """The module ``<package>/<name>`` (parsed once per process)."""
    package, _, stem = name.partition("/")
    if package not in PACKAGES or not stem:
        raise ValueError(f"unknown SQL module {name!r} (modules are <package>/<name>, package one of {PACKAGES})")
    return parse(resources.data_dir(f"tracekit.{package}") / "sql" / f"{stem}.sql", name)


def run(con: duckdb.DuckDBPyConnection, name: str, **params: object) -> None:
    """Run every statement of module ``name`` with ``params``."""
    mod = module(name)
    before = _tables(con) if CHECK else None
    for statement in mod.render(params):
        con.execute(statement)
    if before is not None:
        _check(con, mod, before)


def fetch(con: duckdb.DuckDBPyConnection, name: str, **params: object) -> list[tuple]:
    """Run module ``name`` and return the rows of its last statement (a SELECT)."""
    mod = module(name)
    before = _tables(con) if CHECK else None
    statements = mod.render(params)
    for statement in statements[:-1]:
        con.execute(statement)
    rows = con.execute(statements[-1]).fetchall()
    if before is not None:
        _check(con, mod, before)
    return rows


def every_module() -> list[Module]:
    """Every shipped module, by name."""
    out = []
    for package in PACKAGES:
        folder = resources.data_dir(f"tracekit.{package}") / "sql"
        out += [module(f"{package}/{p.stem}") for p in sorted(folder.glob("*.sql"))]
    return out


def private_tables() -> tuple[str, ...]:
    """Every private working table a shipped module declares."""
    return tuple(sorted({t for m in every_module() for t in m.creates if t.startswith("_")}))


def drop_private(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the private working tables the modules left in ``con``."""
    wanted = set(private_tables())
    for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall():
        if table in wanted:
            con.execute(f"DROP TABLE {table}")


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() UNION ALL SELECT view_name FROM duckdb_views() WHERE NOT internal"
    )
    return {r[0] for r in rows.fetchall()}


def _check(con: duckdb.DuckDBPyConnection, mod: Module, before: set[str]) -> None:
    """``mod`` created what it declares (or replaced it) and nothing else."""
    after = _tables(con)
    undeclared = sorted(after - before - set(mod.creates))
    absent = sorted(set(mod.creates) - after)
    if undeclared or absent:
        raise AssertionError(
            f"{mod.path}: created {undeclared or 'nothing'} it does not declare; declared {absent or 'nothing'} it did not create"
        )
