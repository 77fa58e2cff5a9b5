"""Named queries: ``.sql`` files with a documented header.

A query file holds one read-only SELECT. Its leading ``--`` comment block is
the header: a one-line title, free text, then ``@param`` and ``@column``
lines::

    -- Attention GPU time by stage, per trace.
    --
    -- Longer explanation.
    --
    -- @param include_orphans BOOLEAN = false   Count GPU ops with no launch.
    -- @column trace VARCHAR   Trace label.
    SELECT ... WHERE $include_orphans OR NOT orphan ORDER BY ...;

Parameters are DuckDB named parameters (``$name``); a default of ``''`` is the empty string. A parameter used but not
declared, or declared but not used, is an error naming the file and line.

A query can build on others: ``-- @uses gpu.occupancy`` makes that query's
rows a CTE named by its bare name (``occupancy``) in front of this one, so SQL
shares SQL instead of copying it. The used query's parameters become this
query's (with their defaults) unless it declares them itself.
``-- @empty SENTENCE`` says why the query can return no rows (what the trace
lacks, what to record next time); ``tracekit query`` prints it then.
Queries are found in the shipped ``queries/`` folder, then in folders named
by ``--queries DIR`` or ``$TRACEKIT_QUERY_PATH`` (``os.pathsep``-separated);
a query's id is its path under its folder without ``.sql``, with ``/`` as
``.`` (``core/gpu_timeline`` -> ``core.gpu_timeline``), and its bare file
name works too when unambiguous.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tracekit.common import resources
from tracekit.errors import ParameterError, QueryError

_USES = re.compile(r"^@uses\s+([\w.]+)\s*$")
_EMPTY = re.compile(r"^@empty\s+(\S.*)$")
_PARAM = re.compile(r"^@param\s+(\w+)\s+(\w+)\s*(?:=\s*(\S+))?\s*(.*)$")
_COLUMN = re.compile(r"^@column\s+(\w+)\s+(\S+(?:\s*\[\])?)\s*(.*)$")
_USE = re.compile(r"\$([A-Za-z_]\w*)")
_STRING_OR_COMMENT = re.compile(r"'(?:[^']|'')*'|--[^\n]*")
TYPES = ("BOOLEAN", "INTEGER", "BIGINT", "DOUBLE", "VARCHAR")


@dataclass
class Param:
    """A declared query parameter."""

    name: str
    type: str
    default: object
    doc: str
    line: int


@dataclass
class Column:
    """A documented result column."""

    name: str
    type: str
    doc: str


@dataclass
class Query:
    """A named query loaded from a file."""

    id: str
    path: Path
    title: str
    description: str
    sql: str
    params: dict[str, Param] = field(default_factory=dict)
    columns: list[Column] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)  # ids or bare names of the queries it builds on
    # Parameters used only through the queries it builds on (checked when they are resolved).
    own_unused: list[str] = field(default_factory=list)
    empty: str = ""  # why it can return no rows (@empty)

    @property
    def name(self) -> str:
        """The bare name (file name without ``.sql``)."""
        return self.id.rsplit(".", 1)[-1]

    def bind(self, given: Mapping[str, object]) -> dict[str, object]:
        """Check and convert user parameters; fill in defaults."""
        unknown = sorted(set(given) - set(self.params))
        if unknown:
            known = ", ".join(self.params) or "none"
            raise ParameterError(
                f"query {self.id}: unknown parameter {unknown[0]!r}{suggest(unknown[0], self.params)} "
                f"(parameters: {known})"
            )
        out = {}
        for name, p in self.params.items():
            value = given.get(name, p.default)
            if value is None:
                raise ParameterError(f"query {self.id}: parameter {name!r} is required ({p.doc})")
            out[name] = convert(value, p.type, f"query {self.id}: parameter {name!r}")
        return out


def convert(value, typ: str, what: str):
    """Convert a parameter value (often a CLI string) to ``typ``."""
    if not isinstance(value, str):
        if typ == "BOOLEAN" and isinstance(value, bool):
            return value
        if typ in ("INTEGER", "BIGINT") and isinstance(value, int) and not isinstance(value, bool):
            return value
        if typ == "DOUBLE" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        value = str(value)
    try:
        if typ == "BOOLEAN":
            low = value.strip().lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if typ in ("INTEGER", "BIGINT"):
            return int(value)
        if typ == "DOUBLE":
            return float(value)
    except ValueError:
        raise ParameterError(f"{what} must be {typ}, got {value!r}") from None
    return value


def parse(path: Path, qid: str) -> Query:
    """Parse a query file's header and body; raise QueryError on a bad header."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    header: list[tuple[int, str]] = []
    body_start = 0
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("--"):
            header.append((i + 1, s[2:].strip()))
            continue
        if not s and not header:
            continue
        body_start = i
        break
    else:
        body_start = len(lines)
    where = f"{path}"
    if not header or not header[0][1]:
        raise QueryError(f"{where}:1: query has no header (a '-- Title.' comment line first)")
    title = header[0][1]
    desc: list[str] = []
    params: dict[str, Param] = {}
    columns: list[Column] = []
    uses: list[str] = []
    empty = ""
    for lineno, s in header[1:]:
        if s.startswith("@empty"):
            m = _EMPTY.match(s)
            if not m:
                raise QueryError(f"{where}:{lineno}: bad @empty line (want '@empty SENTENCE')")
            empty = m.group(1).strip()
        elif s.startswith("@uses"):
            m = _USES.match(s)
            if not m:
                raise QueryError(f"{where}:{lineno}: bad @uses line (want '@uses QUERY')")
            uses.append(m.group(1))
        elif s.startswith("@param"):
            m = _PARAM.match(s)
            if not m or m.group(2).upper() not in TYPES:
                raise QueryError(
                    f"{where}:{lineno}: bad @param line (want '@param name TYPE [= default] doc', TYPE in {TYPES})"
                )
            name, typ, default, doc = m.group(1), m.group(2).upper(), m.group(3), m.group(4)
            if default == "''":  # the empty string
                default = ""
            dv = None if default is None else convert(default, typ, f"{where}:{lineno}: default of {name}")
            params[name] = Param(name, typ, dv, doc, lineno)
        elif s.startswith("@column"):
            m = _COLUMN.match(s)
            if not m:
                raise QueryError(f"{where}:{lineno}: bad @column line (want '@column name TYPE doc')")
            columns.append(Column(m.group(1), m.group(2).upper().replace(" ", ""), m.group(3)))
        elif s.startswith("@"):
            raise QueryError(f"{where}:{lineno}: unknown header tag {s.split()[0]!r}")
        elif not columns and not params:
            desc.append(s)
    sql = "\n".join(lines[body_start:]).strip()
    if not sql:
        raise QueryError(f"{where}: query has no SQL after its header")
    used: dict[str, int] = {}
    bare = _STRING_OR_COMMENT.sub(lambda m: " " * len(m.group(0)), sql)
    for m in _USE.finditer(bare):
        used.setdefault(m.group(1), body_start + 1 + bare.count("\n", 0, m.start()))
    for name, lineno in used.items():
        if name not in params:
            raise QueryError(f"{where}:{lineno}: parameter ${name} is used but not declared with @param")
    unused = [name for name in params if name not in used]
    if unused and not uses:
        raise QueryError(f"{where}:{params[unused[0]].line}: parameter {unused[0]!r} is declared but not used")
    return Query(
        qid, path, title, "\n".join(desc).strip(), sql.rstrip(";").strip(), params, columns, uses, unused, empty
    )


def _lookup(lib: dict[str, Query], name: str) -> Query | None:
    if name in lib:
        return lib[name]
    matches = [q for q in lib.values() if q.name == name]
    return matches[0] if len(matches) == 1 else None


def cte(q: Query) -> str:
    """``q`` as a common table expression of a query that ``@uses`` it, named after it."""
    return f'"{q.name}" AS (\n{q.sql}\n)'


def resolve(lib: dict[str, Query], broken: dict[str, str] | None = None) -> dict[str, Query]:
    """Compose every query with the queries it ``@uses`` (recursively); errors name the file.

    With ``broken``, a user query that cannot be composed is recorded there
    (id -> error) and left out instead of failing the whole library.
    """
    done: dict[str, Query] = {}

    def compose(q: Query, stack: tuple[str, ...]) -> Query:
        if q.id in done:
            return done[q.id]
        if q.id in stack:
            raise QueryError(f"{q.path}: @uses forms a cycle: {' -> '.join((*stack, q.id))}")
        if not q.uses:
            done[q.id] = q
            return q
        ctes, params, deps = [], dict(q.params), []
        for name in q.uses:
            found = _lookup(lib, name)
            if found is None:
                raise QueryError(f"{q.path}: @uses {name}: no such query")
            dep = compose(found, (*stack, q.id))
            deps.append(dep)
            for pname, p in dep.params.items():
                mine = params.setdefault(pname, p)
                if mine.type != p.type:
                    raise QueryError(f"{q.path}:{mine.line}: parameter {pname!r} is {mine.type}, {dep.id} has {p.type}")
            ctes.append(cte(dep))
        for pname in q.own_unused:
            if not any(pname in d.params for d in deps):
                raise QueryError(f"{q.path}:{q.params[pname].line}: parameter {pname!r} is declared but not used")
        body = q.sql
        # The used queries' CTEs go first in this query's WITH (RECURSIVE stays right after WITH).
        head = re.match(r"(?is)^with(\s+recursive)?\s", body)
        if head:
            keyword = "WITH RECURSIVE " if head.group(1) else "WITH "
            sql = keyword + ",\n".join(ctes) + ",\n" + body[head.end() :]
        else:
            sql = "WITH " + ",\n".join(ctes) + "\n" + body
        out = Query(q.id, q.path, q.title, q.description, sql, params, q.columns, q.uses, [])
        done[q.id] = out
        return out

    out: dict[str, Query] = {}
    shipped = shipped_dir()
    for qid, q in lib.items():
        try:
            out[qid] = compose(q, ())
        except QueryError as exc:
            if broken is None or q.path.is_relative_to(shipped):
                raise
            broken[qid] = str(exc)
    return out


def shipped_dir() -> Path:
    """The shipped queries folder (the package ``tracekit.queries``)."""
    return resources.data_dir("tracekit.queries")


def search_path(extra_dirs=()) -> list[Path]:
    """Folders searched for queries, shipped first."""
    dirs = [shipped_dir()]
    env = os.environ.get("TRACEKIT_QUERY_PATH", "")
    for d in [*extra_dirs, *[e for e in env.split(os.pathsep) if e]]:
        p = Path(d)
        if not p.is_dir():
            raise QueryError(f"{p}: query folder does not exist")
        dirs.append(p)
    return dirs


# The parsed library per set of query files (each file's path, size and mtime): a report looks up
# dozens of queries, and reading and parsing every file for each lookup added up.
_LOADED: dict[tuple, tuple[dict[str, Query], dict[str, str]]] = {}


def _load(extra_dirs=()) -> tuple[dict[str, Query], dict[str, str]]:
    """(queries by id, broken user query files by id -> error)."""
    roots = search_path(extra_dirs)
    files = [(root, sorted(root.rglob("*.sql"))) for root in roots]
    key = (tuple(map(str, roots)), tuple(_signature(p) for _, paths in files for p in paths))
    if key not in _LOADED:
        _LOADED.clear()  # one library at a time: a changed file replaces it
        _LOADED[key] = _parse_all(files)
    return _LOADED[key]


def _signature(path: Path) -> tuple:
    try:
        st = path.stat()
    except OSError:  # unreadable: parsing it says so, by name
        return (str(path), -1, -1)
    return (str(path), st.st_size, st.st_mtime_ns)


def _parse_all(files) -> tuple[dict[str, Query], dict[str, str]]:
    out: dict[str, Query] = {}
    broken: dict[str, str] = {}
    shipped = shipped_dir()
    for root, paths in files:
        for path in paths:
            qid = ".".join(path.relative_to(root).with_suffix("").parts)
            try:
                out[qid] = parse(path, qid)
            except (QueryError, OSError, UnicodeDecodeError) as exc:
                if root == shipped:
                    raise
                # One broken user file must not break every other query: it is reported by name.
                broken[qid] = str(exc) if isinstance(exc, QueryError) else f"{path}: cannot read ({exc})"
    return resolve(out, broken), broken


def library(extra_dirs=()) -> dict[str, Query]:
    """All queries by id. A user query with a shipped query's id replaces it; broken user files are left out."""
    return _load(extra_dirs)[0]


def broken(extra_dirs=()) -> dict[str, str]:
    """User query files that could not be read, parsed or composed: id -> the error naming the file."""
    return _load(extra_dirs)[1]


def find(name: str, extra_dirs=()) -> Query:
    """Look a query up by id or bare name."""
    lib, bad = _load(extra_dirs)
    if name in lib:
        return lib[name]
    matches = [q for q in lib.values() if q.name == name]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise QueryError(f"query name {name!r} is ambiguous: {', '.join(q.id for q in matches)}")
    for qid, problem in bad.items():
        if name in (qid, qid.rsplit(".", 1)[-1]):
            raise QueryError(problem)
    names = list(lib) if "." in name else [q.name for q in lib.values()]
    raise QueryError(f"no query named {name!r}{suggest(name, names)} (run 'tracekit queries' to list them)")


def suggest(name: str, known) -> str:
    """``: did you mean 'x'?`` for the closest of ``known`` names, or empty."""
    import difflib

    close = difflib.get_close_matches(name, sorted(set(known)), n=2, cutoff=0.6)
    return f": did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
