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
from tracekit.common.sqltext import Macro
from tracekit.model import link, rules, sqlmodules
from tracekit.schema import catalog

# Views over the linked tables, created with them.
VIEWS = {
    **assign.VIEWS,
    "cpu_ops": "SELECT * FROM cpu_slices WHERE kind = 'cpu_op'",
    # Views read the rule table at query time, so --rules (TEMP tables) reaches them.
    "kernel_precision_classes": """
        SELECT d.name, coalesce(r.precision, 'other') AS precision, r.pattern AS rule, r.note AS rule_note,
               r.rule_order
        FROM (SELECT DISTINCT name FROM gpu_ops WHERE kind = 'kernel') d
        LEFT JOIN rule_kernel_precision r ON regexp_matches(d.name, r.pattern)
        QUALIFY row_number() OVER (PARTITION BY d.name ORDER BY r.rule_order NULLS LAST) = 1""",
    "annotations": "SELECT * FROM cpu_slices WHERE kind = 'user_annotation'",
    # The one definition of a profiler step: the ProfilerStep#N range prof.step() records.
    "profiler_steps": """
        SELECT id, trace_id, pid, tid, name AS step_name,
               TRY_CAST(regexp_extract(name, '^ProfilerStep#([0-9]+)$', 1) AS BIGINT) AS step, ts_ns, end_ns, dur_ns
        FROM cpu_slices WHERE kind = 'user_annotation' AND name LIKE 'ProfilerStep#%'""",
}

# Macros over the linked tables, created with them.
MACROS = (
    Macro(
        "kernel_totals",
        "include_orphans",
        "Kernels per trace and name: kernel_totals(include_orphans) gives trace_id, name, gpu_ops (launches) and "
        "total_ns (summed duration); orphans count when include_orphans is true.",
        """
        SELECT trace_id, name, count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS total_ns
        FROM gpu_ops
        WHERE kind = 'kernel' AND (include_orphans OR NOT orphan)
        GROUP BY trace_id, name""",
        table=True,
    ),
    Macro(
        "peak_dtype",
        "dtype",
        "The rule_device_peaks dtype (fp8, bf16, fp16, fp32, fp64) of an op's input dtype as Input types write it "
        "(c10::Float8_*, c10::BFloat16, c10::Half, float, double); NULL for any other.",
        """
        CASE WHEN dtype LIKE 'c10::Float8%' THEN 'fp8' WHEN dtype = 'c10::BFloat16' THEN 'bf16'
             WHEN dtype = 'c10::Half' THEN 'fp16' WHEN dtype = 'float' THEN 'fp32' WHEN dtype = 'double' THEN 'fp64'
        END""",
    ),
    Macro(
        "dtype_bytes",
        "dtype",
        "Bytes per element of a dtype as Input types write it (double 8; float, int 4; c10::BFloat16, c10::Half, "
        "short 2; c10::Float8_*, signed/unsigned char, c10::qint8 1; complex types twice their part); NULL for any other.",
        """
        CASE WHEN dtype IN ('double', 'c10::complex<float>') THEN 8
             WHEN dtype IN ('float', 'int', 'c10::complex<c10::Half>') THEN 4
             WHEN dtype IN ('c10::BFloat16', 'c10::Half', 'short') THEN 2
             WHEN dtype LIKE 'c10::Float8%' OR dtype IN ('signed char', 'unsigned char', 'c10::qint8') THEN 1
        END""",
    ),
    Macro(
        "op_subtree_gpu",
        "names",
        "Per CPU op whose name is in the list `names`: op_id, named_below (how many ops of those names lie strictly "
        "below it) and kernel_ns (summed duration of the GPU ops launched anywhere in its subtree; NULL when it "
        "launched none). What a call of a library op (a GEMM, a convolution) cost on the GPU, wherever below it the "
        "kernels were launched.",
        """
        WITH RECURSIVE ops AS (
            SELECT id FROM cpu_slices WHERE kind = 'cpu_op' AND list_contains(names, name)
        ),
        below(op_id, id) AS (
            SELECT id, id FROM ops
            UNION ALL
            SELECT b.op_id, c.id FROM below b JOIN cpu_slices c ON c.parent_id = b.id WHERE c.kind = 'cpu_op'
        )
        SELECT b.op_id, count(*) FILTER (WHERE b.id <> b.op_id AND b.id IN (SELECT id FROM ops)) AS named_below,
               sum(g.kernel_ns)::BIGINT AS kernel_ns
        FROM below b
        LEFT JOIN (SELECT cpu_op_id, sum(dur_ns) AS kernel_ns FROM gpu_ops GROUP BY cpu_op_id) g ON g.cpu_op_id = b.id
        GROUP BY b.op_id""",
        table=True,
    ),
    Macro(
        "roofline_peaks",
        "wanted",
        "The roofline peaks per trace and dtype: roofline_peaks(wanted) gives trace_id, dtype (fp8, bf16, ...), "
        "device, peak_tflops and peak_tbps from the first rule_device_peaks row whose pattern matches the device "
        "name (or whose device starts with it, e.g. H100); the name is `wanted`, or each trace's first GPU when "
        "`wanted` is auto.",
        """
        SELECT dn.trace_id, r.dtype, arg_min(r.device, r.rule_order) AS device,
               arg_min(CAST(r.peak_tflops AS DOUBLE), r.rule_order) AS peak_tflops,
               arg_min(CAST(r.peak_tbps AS DOUBLE), r.rule_order) AS peak_tbps
        FROM (
            SELECT t.trace_id, CASE WHEN wanted = 'auto' THEN (SELECT arg_min(d.name, d.device) FROM devices d
                                                               WHERE d.trace_id = t.trace_id) ELSE wanted END AS name
            FROM traces t
        ) dn
        JOIN rule_device_peaks r ON regexp_matches(dn.name, r.pattern) OR starts_with(lower(r.device), lower(dn.name))
        GROUP BY dn.trace_id, r.dtype""",
        table=True,
    ),
    Macro(
        "counts_as_call",
        "direction",
        "Whether an attention call of this direction (attention_calls.direction) is one that per-call figures "
        "divide by: a forward call, or one with no direction (a kernel-defined call). A backward call belongs "
        "to the forward call autograd ran it for. The one definition of a call for per-call figures "
        "(call_counts, headline, diff --per-call).",
        "direction IS DISTINCT FROM 'backward'",
    ),
    Macro(
        "step_of",
        "trace, process, at_ns",
        "The profiler step (ProfilerStep#N's N) whose range contains the CPU time at_ns in process `process` of "
        "trace `trace`, on any thread of the process (a backward-thread launch belongs to the step it ran in); "
        "NULL outside every step.",
        """
        SELECT max(p.step) FROM profiler_steps p
        WHERE p.trace_id = trace AND p.pid = process AND at_ns >= p.ts_ns AND at_ns < p.end_ns""",
    ),
)


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
    for name, sql in VIEWS.items():
        con.execute(f"CREATE OR REPLACE {kind} {name} AS {sql}")
    for macro in MACROS:
        con.execute(macro.create(temp=ctx.temp))


STEPS: tuple[Step, ...] = (
    Step("nest", (), lambda con, ctx: link.nest(con)),
    Step("link", link.TABLES, lambda con, ctx: link.build_tables(con, ctx.kind)),
    Step("rules", tuple(f"rule_{n}" for n in rules.names()), lambda con, ctx: rules.load(con, ctx.rule_dirs, ctx.temp)),
    Step("attribution", assign.TABLES, lambda con, ctx: assign.build(con, temp=ctx.temp)),
    Step("views", tuple(VIEWS), _views),
)
# Steps of many small statements, run in one transaction (see transaction). The steps
# that write the large tables are not: committed at once, they made the final checkpoint
# 0.4-1.4 s slower on x22.
SMALL_STEPS = ("rules", "views")
# What re-attribution over a linked database runs again.
REATTRIBUTE = ("nest", "rules", "attribution")

# Every table and view the model creates, and its macros (a query naming one needs the model built).
NAMES: tuple[str, ...] = tuple(name for step in STEPS for name in step.creates)
MACRO_NAMES: tuple[str, ...] = tuple(m.name for m in MACROS)


def build(
    con: duckdb.DuckDBPyConnection, temp: bool = False, rule_dirs: Sequence = (), steps: Sequence[str] | None = None
) -> None:
    """Build the linked model over the base tables of ``con``.

    ``temp=True`` creates TEMP tables and views of this connection only (a
    database that cannot be written, or other rules for one session);
    ``rule_dirs`` are user rule folders read before the shipped rules;
    ``steps`` runs only the named steps (default: all). A complete build
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
    finally:
        sqlmodules.drop_private(con)
    if not temp:  # the docs of the tables built, in the database (TEMP objects take no comments)
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
    flushes the write-ahead log: the model's 324 ``COMMENT ON`` took
    0.7-1.3 s on a busy disk, 0.07-0.25 s as one transaction.
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
