"""The linked model: the one place that knows how it is built and what it creates.

``tracekit load`` writes the events and base tables (``ingest``); everything
below is built over them by ``build``, once per database, either at load time
(``load --link``) or by the first query that reads one of these tables:

1. ``nest``: every CPU slice on one integer axis per thread, with its container
   ancestors (working tables ``_cpu``, ``_anc``; see ``link``);
2. ``link``: cpu_slices, runtime_calls, gpu_ops, python_functions, collectives;
3. ``rules``: the ``rule_*`` tables from the shipped and user rule folders;
4. ``attribution``: cpu_stage_decisions, gpu_op_stage_decisions, attention_calls;
5. ``views``: views over the linked tables (cpu_stages, gpu_op_stages, cpu_ops, ...).

Re-attribution with other rule folders (``--rules``) runs steps 1, 3 and 4
again as TEMP tables of one connection, which shadow the stored ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from tracekit.attribution import assign
from tracekit.common import sqlmodules
from tracekit.model import link, rules
from tracekit.schema import catalog

# Views and macros over the linked tables, created with them (store/sql/model_views, store/sql/model_macros),
# and the attribution's views. Views read the rule tables at query time, so --rules (TEMP tables) reaches them.
MODEL_VIEWS = tuple(sqlmodules.folder("store/model_views"))
MACROS = tuple(sqlmodules.folder("store/model_macros"))  # none calls another
VIEWS = tuple(name for view in MODEL_VIEWS for name in view.creates)


@dataclass(frozen=True)
class Context:
    """What a step needs besides the connection."""

    temp: bool
    rule_dirs: tuple[Path, ...]

    @property
    def kind(self) -> str:
        """The CREATE keyword for the step's tables."""
        return "TEMP TABLE" if self.temp else "TABLE"


@dataclass(frozen=True)
class Step:
    """One step of the build: a name, the tables/views it creates, and what runs it."""

    name: str
    creates: tuple[str, ...]
    run: Callable[[duckdb.DuckDBPyConnection, Context], object]


def _views(con: duckdb.DuckDBPyConnection, ctx: Context) -> None:
    kind = "TEMP VIEW" if ctx.temp else "VIEW"
    for view in MODEL_VIEWS:
        sqlmodules.run(con, view.name, view=kind)
    for macro in MACROS:
        sqlmodules.run(con, macro.name, macro="TEMP MACRO" if ctx.temp else "MACRO")


STEPS: tuple[Step, ...] = (
    Step("nest", (), lambda con, ctx: link.nest(con)),
    Step("link", link.TABLES, lambda con, ctx: link.build_tables(con, ctx.kind)),
    Step("rules", tuple(f"rule_{n}" for n in rules.names()), lambda con, ctx: rules.load(con, ctx.rule_dirs, ctx.temp)),
    Step("attribution", assign.TABLES, lambda con, ctx: assign.build(con, temp=ctx.temp)),
    Step("views", tuple(VIEWS), _views),
)
# Steps of many small statements, run in one transaction (see transaction). The steps
# that write the large tables are not: committed at once, they made the final checkpoint slower.
SMALL_STEPS = ("rules", "views")
# What re-attribution over a linked database runs again.
REATTRIBUTE = ("nest", "rules", "attribution")

# Every table and view the model creates, and its macros (a query naming one needs the model built).
NAMES: tuple[str, ...] = tuple(name for step in STEPS for name in step.creates)
MACRO_NAMES: tuple[str, ...] = tuple(sqlmodules.signature(m)[0] for m in MACROS)


def build(
    con: duckdb.DuckDBPyConnection,
    temp: bool = False,
    rule_dirs: Sequence = (),
    steps: Sequence[str] | None = None,
    comment: bool = True,
) -> None:
    """Build the linked model over the base tables of ``con``.

    ``temp=True`` creates TEMP tables and views of this connection only (a
    database that cannot be written, or other rules for one session);
    ``rule_dirs`` are user rule folders read before the shipped rules;
    ``steps`` runs only the named steps (default: all); ``comment=False``
    leaves out the tables' docs (a load task's part: the merge's ``adopt``
    writes them once, a Parquet partition keeps none). A complete build
    into the database is recorded in ``tracekit_info``.
    """
    wanted = tuple(s.name for s in STEPS) if steps is None else tuple(steps)
    unknown = set(wanted) - {s.name for s in STEPS}
    if unknown:
        raise ValueError(f"unknown model steps: {', '.join(sorted(unknown))}")
    ctx = Context(temp, tuple(Path(d) for d in rule_dirs))
    try:
        for step in STEPS:
            if step.name in wanted:
                _run(con, ctx, step)
    except BaseException:
        # The cleanup may fail too (an out-of-memory error aborts the caller's transaction): the error
        # that stopped the build is the one reported, not "Current transaction is aborted".
        with contextlib.suppress(duckdb.Error):
            sqlmodules.drop_private(con)
        raise
    sqlmodules.drop_private(con)
    if comment and not temp:  # the docs of the tables built, in the database (TEMP objects take no comments)
        with transaction(con):
            con.execute(catalog.comments(n for s in STEPS if s.name in wanted for n in s.creates))
    if steps is None and not temp:
        con.execute("UPDATE tracekit_info SET value = 'true' WHERE key = 'linked'")


def _run(con: duckdb.DuckDBPyConnection, ctx: Context, step: Step) -> None:
    if step.name in SMALL_STEPS:
        with transaction(con):
            step.run(con, ctx)
    else:
        step.run(con, ctx)


def adopt(con: duckdb.DuckDBPyConnection, comment: bool = True) -> None:
    """The linked tables are in ``con`` already (merged from traces linked one by one, or a dataset's
    Parquet files): create what the build creates over them (the steps that make only views and
    macros), their docs when ``comment``, and record the model built."""
    ctx = Context(False, ())
    with transaction(con):
        for step in STEPS:
            if step.creates and all(catalog.TABLES[n].kind == "view" for n in step.creates):
                step.run(con, ctx)
        if comment:
            con.execute(catalog.comments(NAMES))
    con.execute("UPDATE tracekit_info SET value = 'true' WHERE key = 'linked'")


@contextmanager
def transaction(
    con: duckdb.DuckDBPyConnection, commit: Callable[[duckdb.DuckDBPyConnection], object] | None = None
) -> Iterator[None]:
    """Run the block's statements in one transaction, or in the caller's when one is open.

    ``commit`` ends it (default: COMMIT; ``database.commit_checkpointed``
    for a build). Autocommitted, each statement commits on its own and
    flushes the write-ahead log: the model's few hundred ``COMMENT ON`` take
    about ten times longer that way on a busy disk than as one transaction.
    """
    # Autocommitted statements each get a new transaction id; a BEGIN inside
    # the caller's transaction (database.link_file) would abort it.
    first = con.execute("SELECT txid_current()").fetchall()
    if con.execute("SELECT txid_current()").fetchall() == first:
        yield
        return
    con.execute("BEGIN")
    try:
        yield
        if commit is None:
            con.execute("COMMIT")
        else:
            commit(con)
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT has already rolled back
            con.execute("ROLLBACK")
        raise


def is_built(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the linked model exists (in the database or as this session's TEMP tables)."""
    rows = con.execute("SELECT value FROM tracekit_info WHERE key = 'linked'").fetchall()
    if rows and rows[0][0] == "true":
        return True
    return bool(con.execute("SELECT 1 FROM duckdb_tables() WHERE temporary AND table_name = 'cpu_slices'").fetchall())


def reattribute(con: duckdb.DuckDBPyConnection, rule_dirs: Sequence) -> None:
    """Rebuild the rule and attribution tables with ``rule_dirs`` as TEMP tables of ``con``."""
    build(con, temp=True, rule_dirs=rule_dirs, steps=REATTRIBUTE)
