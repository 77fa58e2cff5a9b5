"""The step runner: the model's SQL lives in ``.sql`` modules; Python orders them and binds their parameters.

The runner sits at the bottom of the layers (``common``): every layer that builds tables (``ingest``,
``model``, ``attribution``, ``store``) keeps its SQL in its own ``sql/`` folder and runs it here.

A module is a file ``tracekit/<package>/sql/<name>.sql``, named ``<package>/<name>`` (``model/axis``; a
name may hold folders: ``store/base_macros/busy_union``). It
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

Slots, written ``{{...}}``:

- ``{{name}}``: a parameter, written by its declared type: ``INT`` an integer, ``TEXT`` a quoted string,
  ``LIST`` a parenthesised list of quoted strings, ``ROWS`` rows of ints and strings for a ``VALUES`` list, ``IDENT`` a name (an identifier, or one qualified by its
  table and struct: ``x.d.stage``; also ``true`` and ``false``, for a fragment's condition), ``COLUMNS`` the
  typed ``args`` columns of ``schema.fields`` (``(key, column, type)`` triples, written ``a."key" AS column``,
  ``a`` being the parsed ``args``), ``KEYWORD(A|B)`` one of the words listed, ``BOOL`` a bool (``true`` or
  ``false``; also the condition of an ``{{if}}``), ``VALUE`` a constant of any shape (``sqltext.constant``:
  ``None`` as ``NULL``, a list as ``[...]``, a dict as a struct ``{'key': ...}``). A parameter declared and not
  used, used and not declared, or missing or extra in a call is an error naming the file (and the line, for a
  declaration). Values are tracekit's own vocabulary, identifiers, numbers and staged file paths, never the
  user's text (DuckDB binds that, see ``sqlsafety``).
- ``{{if name}} ... {{else}} ... {{endif}}``: the text of one branch, chosen by the ``BOOL`` parameter ``name``
  (``{{else}}`` may be left out; blocks may nest, within one statement). Where a branch would only change a
  value, a parameter is simpler; a block is for text that is there or not (a column, a whole read).
- ``{{include package/name key=value ...}}``: a fragment module (header line ``-- @fragment``: one query
  or expression, no statement of its own) written in place, with its parameters given as words, numbers,
  ``NULL`` (``None``) or the including module's own parameters (``key={{name}}`` is not needed: ``key=name``
  passes one through when ``name`` is a parameter of the including module). The fragment's name may be a
  ``KEYWORD`` parameter whose words are fragment names: the caller chooses one (``{{include bounds}}``,
  ``-- @param bounds KEYWORD(attribution/a|attribution/b)``), where the choice decides which operators the
  plan holds.
- ``{{pattern_hits RULES NAMES SUBJECT}}``: a query of (SUBJECT, pattern) for each distinct SUBJECT of the
  table or CTE NAMES and each pattern of the rule table RULES it matches, read from the connection when the
  module runs: one ``SELECT`` per pattern, the pattern written as a literal, so that DuckDB compiles each
  regex once (a join on ``regexp_matches(subject, r.pattern)`` compiles it once per pair). The words are
  names as written, not parameters.

``@creates`` names what a module leaves behind (made, or replaced); ``@scratch`` what it makes and drops
itself. Names that start with ``_`` are private working tables: the build drops every one that is left when
it ends, also after a failure (``drop_private``), and ``docs/architecture.md`` lists them. The tests run builds with ``CHECK`` on, which verifies after each
module that it left what it declares and nothing else (a macro module: by its text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import duckdb

from tracekit.common import resources, sqltext

# Packages whose sql/ folder holds modules.
PACKAGES = ("ingest", "model", "attribution", "store", "present")

_PARAM = re.compile(r"^--\s*@param\s+(\w+)\s+(INT|TEXT|LIST|ROWS|IDENT|COLUMNS|BOOL|VALUE|KEYWORD\(([^)]*)\))\s*(.*)$")
_CREATES = re.compile(r"^--\s*@creates\s+(\w+)\s*(.*)$")
_SCRATCH = re.compile(r"^--\s*@scratch\s+(\w+)\s*(.*)$")
_READS = re.compile(r"^--\s*@reads\s+(.*)$")
_SLOT = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

# Tests set this: after each module, check that it left exactly what it declares.
CHECK = False


@dataclass(frozen=True)
class Param:
    """A declared parameter: its name, type, allowed words (KEYWORD), doc and header line."""

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
    fragment: bool
    params: dict[str, Param]
    reads: tuple[str, ...]
    creates: dict[str, str]
    scratch: dict[str, str]
    statements: tuple[str, ...]

    @property
    def summary(self) -> str:
        """The header's first paragraph, one line: what the module is, for a reader of the docs."""
        lines = [self.title]
        for line in self.doc.splitlines():  # the title's paragraph: up to the first blank line
            if not line.strip():
                break
            lines.append(line.strip())
        return " ".join(lines)

    def render(self, values: dict[str, object], con: duckdb.DuckDBPyConnection | None = None) -> list[str]:
        """The statements with ``values`` and every slot written in, checked against the declarations
        (``con``: where a ``pattern_hits`` slot reads its patterns)."""
        missing = sorted(set(self.params) - set(values))
        extra = sorted(set(values) - set(self.params))
        if missing or extra:
            said = [f"missing {', '.join(missing)}"] * bool(missing) + [f"not declared: {', '.join(extra)}"] * bool(
                extra
            )
            raise ValueError(f"{self.path}: parameters do not match the header ({'; '.join(said)})")
        text = {name: _write(self.params[name], value, self.path) for name, value in values.items()}
        return [
            _SLOT.sub(lambda m: self._slot(m.group(1), values, text, con), _choose(s, values)) for s in self.statements
        ]

    def _slot(
        self, slot: str, values: dict[str, object], text: dict[str, str], con: duckdb.DuckDBPyConnection | None
    ) -> str:
        words = slot.split()
        if len(words) == 1:
            return text[words[0]]
        if words[0] == "include":
            inner = module(str(values[words[1]]) if words[1] in self.params else words[1])
            given = dict(w.split("=", 1) for w in words[2:])
            passed = {k: values[v] if v in self.params else _word(v) for k, v in given.items()}
            (query,) = inner.render(passed, con)
            return query
        if words[0] == "pattern_hits" and len(words) == 4:
            if con is None:
                raise ValueError(f"{self.path}: a pattern_hits slot needs the connection (sqlmodules.run or fetch)")
            return pattern_hits(con, *words[1:])
        raise ValueError(f"{self.path}: unknown slot {{{{{slot}}}}}")


def _word(value: str) -> object:
    """A word given to an included fragment: an integer, ``NULL`` (None), or a name."""
    if value == "NULL":
        return None
    return int(value) if re.fullmatch(r"-?[0-9]+", value) else value


_BRANCHES = ("if", "else", "endif")


def _choose(statement: str, values: dict[str, object]) -> str:
    """``statement`` with each ``{{if}}`` block replaced by the branch its condition chooses."""
    out: list[str] = []
    taken: list[bool] = []  # per open block: whether the branch being read is the one written
    at = 0
    for m in _SLOT.finditer(statement):
        words = m.group(1).split()
        if words[0] not in _BRANCHES:
            continue
        if all(taken):
            out.append(statement[at : m.start()])
        if words[0] == "if":
            taken.append(bool(values[words[1]]))
        elif words[0] == "else":
            taken[-1] = not taken[-1]
        else:
            taken.pop()
        at = m.end()
    out.append(statement[at:])
    return "".join(out)


def _check_branches(path: Path, statement: str, params: dict[str, Param]) -> None:
    """The ``{{if}}`` blocks of ``statement`` are whole (each ``{{if}}`` has its ``{{endif}}`` and at most one
    ``{{else}}``) and each names a ``BOOL`` parameter."""
    open_blocks: list[bool] = []  # per open block: whether its {{else}} was seen
    for slot in _SLOT.findall(statement):
        words = slot.split()
        if words[0] == "if":
            if len(words) != 2 or words[1] not in params or params[words[1]].type != "BOOL":
                raise ValueError(f"{path}: {{{{{slot}}}}} must name one BOOL parameter")
            open_blocks.append(False)
        elif words[0] in ("else", "endif"):
            if len(words) != 1 or not open_blocks or (words[0] == "else" and open_blocks[-1]):
                raise ValueError(f"{path}: {{{{{slot}}}}} without its {{{{if}}}}")
            if words[0] == "else":
                open_blocks[-1] = True
            else:
                open_blocks.pop()
    if open_blocks:
        raise ValueError(f"{path}: an {{{{if}}}} without its {{{{endif}}}} (a block ends within its statement)")


def _write(param: Param, value: object, path: Path) -> str:
    """The SQL text of ``value`` for ``param``."""
    where = f"{path}:{param.line}: parameter {param.name}"
    if param.type == "INT":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"{where} must be an int, got {value!r}")
        return str(value)
    if param.type == "TEXT":
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a string, got {value!r}")
        return sqltext.literal(value)
    if param.type == "LIST":
        if isinstance(value, str):
            raise ValueError(f"{where} must be a list of strings, got the string {value!r}")
        items = list(value)  # type: ignore[call-overload]
        if not items:
            raise ValueError(f"{where} must not be an empty list")
        return sqltext.in_list(items)
    if param.type == "ROWS":
        rows = [tuple(v) for v in value]  # type: ignore[attr-defined]
        if not rows or any(not isinstance(x, (int, str)) or isinstance(x, bool) for r in rows for x in r):
            raise ValueError(f"{where} must be a non-empty list of rows of ints and strings, got {value!r}")
        return ", ".join(
            "(" + ", ".join(str(x) if isinstance(x, int) else sqltext.literal(x) for x in r) + ")" for r in rows
        )
    if param.type == "COLUMNS":
        items = [tuple(v) for v in value]  # type: ignore[attr-defined]
        if not items:
            raise ValueError(f"{where} must not be an empty list")
        return ", ".join(f'a."{key.replace(chr(34), chr(34) * 2)}" AS {column}' for key, column, *_ in items)
    if param.type == "BOOL":
        if not isinstance(value, bool):
            raise ValueError(f"{where} must be a bool, got {value!r}")
        return "true" if value else "false"
    if param.type == "VALUE":
        try:
            return sqltext.constant(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if param.type == "IDENT":
        if not isinstance(value, str) or not _NAME.match(value):
            raise ValueError(f"{where} must be a name (an identifier, or a qualified one), got {value!r}")
        return value
    if value not in param.words:
        raise ValueError(f"{where} must be one of {', '.join(param.words)}, got {value!r}")
    return str(value)


def parse(path: Path, name: str) -> Module:
    """Parse the module at ``path``; an error names the file and line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header: list[str] = []
    while len(header) < len(lines) and lines[len(header)].startswith("--"):
        header.append(lines[len(header)])
    if not header or not header[0][2:].strip() or header[0][2:].strip().startswith("@"):
        raise ValueError(f"{path}:1: a module starts with a '-- title' line")
    params: dict[str, Param] = {}
    creates: dict[str, str] = {}
    scratch: dict[str, str] = {}
    reads: list[str] = []
    doc: list[str] = []
    fragment = False
    for number, line in enumerate(header, start=1):
        said = line[2:].strip()
        if not said.startswith("@"):
            doc.append(said)
        elif said == "@fragment":
            fragment = True
        elif m := _PARAM.match(line):
            if m.group(1) in _BRANCHES:
                raise ValueError(
                    f"{path}:{number}: {m.group(1)} is a word of the {{{{if}}}} slot, not a parameter name"
                )
            words = tuple(w.strip() for w in m.group(3).split("|")) if m.group(3) is not None else ()
            kind = "KEYWORD" if m.group(2).startswith("KEYWORD") else m.group(2)
            params[m.group(1)] = Param(m.group(1), kind, words, m.group(4), number)
        elif m := _CREATES.match(line):
            creates[m.group(1)] = m.group(2)
        elif m := _SCRATCH.match(line):
            scratch[m.group(1)] = m.group(2)
        elif m := _READS.match(line):
            reads += [r.strip() for r in m.group(1).split(",") if r.strip()]
        else:
            raise ValueError(
                f"{path}:{number}: unknown header line {line!r} (@param, @reads, @creates, @scratch, @fragment)"
            )
    body = "\n".join(lines[len(header) :])
    used = set()
    for slot in _SLOT.findall(body):
        words = slot.split()
        if words[0] in _BRANCHES:
            used |= set(words[1:2])
        elif len(words) == 1:
            used.add(words[0])
        elif words[0] == "include":
            used |= {w.split("=", 1)[1] for w in words[2:] if "=" in w} & set(params)
            if words[1] in params:
                if params[words[1]].type != "KEYWORD":
                    raise ValueError(f"{path}: the fragment {words[1]} is a parameter, and must be a KEYWORD")
                used.add(words[1])
    for p in params.values():
        if p.name not in used:
            raise ValueError(f"{path}:{p.line}: parameter {p.name} is declared and not used")
    for u in sorted(used - set(params)):
        raise ValueError(f"{path}: {{{{{u}}}}} is used and not declared (-- @param {u} TYPE doc)")
    statements = tuple(s.strip() for s in re.split(r";[ \t]*(?:\n|$)", body) if s.strip())
    if not statements:
        raise ValueError(f"{path}: no statement after the header")
    for statement in statements:
        _check_branches(path, statement, params)
    if fragment and (len(statements) != 1 or creates):
        raise ValueError(f"{path}: a fragment holds one query and creates nothing")
    doc_text = "\n".join(doc[1:]).rstrip()
    return Module(name, path, doc[0], doc_text, fragment, params, tuple(reads), creates, scratch, statements)


@cache
def module(name: str) -> Module:
    """The module ``<package>/<name>`` (parsed once per process)."""
    package, _, stem = name.partition("/")
    if package not in PACKAGES or not stem:
        raise ValueError(f"unknown SQL module {name!r} (modules are <package>/<name>, package one of {PACKAGES})")
    return parse(resources.data_dir(f"tracekit.{package}") / "sql" / f"{stem}.sql", name)


def folder(name: str) -> list[Module]:
    """The modules of folder ``<package>/<folder>`` (``store/base_macros``), by name."""
    package, _, sub = name.partition("/")
    return _modules(package, f"{sub}/*.sql")


def _modules(package: str, pattern: str) -> list[Module]:
    """The modules of ``package`` whose paths below its sql/ folder match the glob ``pattern``, by name."""
    root = resources.data_dir(f"tracekit.{package}") / "sql"
    return [module(f"{package}/{p.relative_to(root).with_suffix('').as_posix()}") for p in sorted(root.glob(pattern))]


def run(con: duckdb.DuckDBPyConnection, name: str, **params: object) -> None:
    """Run every statement of module ``name`` with ``params``."""
    _execute(con, name, params)


def fetch(con: duckdb.DuckDBPyConnection, name: str, **params: object) -> list[tuple]:
    """Run module ``name`` and return the rows of its last statement (a query)."""
    return _execute(con, name, params)


def _execute(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, object]) -> list[tuple]:
    """Run module ``name``'s statements; the rows of the last (read before ``CHECK`` queries the catalog)."""
    mod = module(name)
    # A macro module is checked by its text (one CREATE of the macro it declares: test_sql_modules): listing
    # the connection's functions takes ten times as long as listing its tables and views.
    before = _objects(con) if CHECK and not _CREATE_MACRO.match(mod.statements[0]) else None
    rows: list[tuple] = []
    for statement in mod.render(params, con):
        rows = con.execute(statement).fetchall()
    if before is not None:
        _check(con, mod, before)
    return rows


def text(name: str, **params: object) -> str:
    """The one query of module ``name`` with ``params``, for a caller that hands it to DuckDB another way
    (``con.sql(...).pl()``)."""
    (query,) = module(name).render(params)
    return query


_CREATE_MACRO = re.compile(r"CREATE OR REPLACE \{\{macro\}\} (\w+)\(([^)]*)\)")


def signature(mod: Module) -> tuple[str, str]:
    """The name and arguments of the macro module ``mod`` creates (``busy_union``, ``intervals``)."""
    m = _CREATE_MACRO.match(mod.statements[0])
    if m is None:
        raise ValueError(f"{mod.path}: a macro module starts with CREATE OR REPLACE {{{{macro}}}} name(args)")
    return m.group(1), m.group(2)


def run_with(con: duckdb.DuckDBPyConnection, mod: Module, vocabulary: dict[str, object], **params: object) -> None:
    """Run ``mod`` with ``params`` and, of ``vocabulary``, the parameters its header declares."""
    run(con, mod.name, **params, **{k: v for k, v in vocabulary.items() if k in mod.params and k not in params})


def pattern_hits(con: duckdb.DuckDBPyConnection, rules: str, names: str, subject: str) -> str:
    """SQL: (``subject``, pattern) for each distinct ``subject`` of ``names`` and each pattern of ``rules`` it
    matches (the ``pattern_hits`` slot). Each pattern is written as a literal, so DuckDB compiles it once."""
    for name in (rules, names, subject):
        if not _IDENT.match(name):
            raise ValueError(f"pattern_hits: {name!r} is not a plain identifier")
    patterns = [p for (p,) in con.execute(f"SELECT DISTINCT pattern FROM {rules} WHERE pattern IS NOT NULL").fetchall()]
    if not patterns:
        return f"SELECT NULL::VARCHAR AS {subject}, NULL::VARCHAR AS pattern WHERE false"
    return " UNION ALL ".join(
        f"SELECT {subject}, {sqltext.literal(p)} AS pattern FROM (SELECT DISTINCT {subject} FROM {names}) "
        f"WHERE regexp_matches({subject}, {sqltext.literal(p)})"
        for p in patterns
    )


def every_module() -> list[Module]:
    """Every shipped module, by name."""
    return [m for package in PACKAGES for m in _modules(package, "**/*.sql")]


@cache
def private_tables() -> tuple[str, ...]:
    """Every private working table a shipped module declares."""
    return tuple(sorted({t for m in every_module() for t in (*m.creates, *m.scratch) if t.startswith("_")}))


def drop_private(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the private working tables the modules left in ``con``."""
    wanted = set(private_tables())
    for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall():
        if table in wanted:
            con.execute(f"DROP TABLE {table}")


def _objects(con: duckdb.DuckDBPyConnection) -> set[str]:
    tables = con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
    views = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    return {r[0] for r in tables + views}


def _check(con: duckdb.DuckDBPyConnection, mod: Module, before: set[str]) -> None:
    """``mod`` left what it declares (made or replaced) and nothing else."""
    after = _objects(con)
    undeclared = sorted(after - before - set(mod.creates))
    absent = sorted(set(mod.creates) - after)
    if undeclared or absent:
        raise AssertionError(
            f"{mod.path}: left {undeclared or 'nothing'} it does not declare; "
            f"declared {absent or 'nothing'} it did not leave"
        )
