"""The ``tracekit`` command line: argument parsing and rendering only.

Each command is a thin call into the library (``tracekit.api``); errors the
library raises become one ``Error: ...`` line and exit code 1 in ``main``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import traceback
from pathlib import Path
from typing import NoReturn

import click
import duckdb

from tracekit import __version__, api, diff
from tracekit.common import interrupts, outputs, sqlsafety
from tracekit.errors import ParameterError, QueryError, TracekitError
from tracekit.library import queries
from tracekit.present import console, humanize, render, values
from tracekit.store import database

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def output_options(fn):
    """The option bundle every row-printing command shares."""

    @click.option(
        "-f",
        "--format",
        "fmt",
        type=click.Choice(render.FORMATS),
        default="table",
        show_default=True,
        help="Output format.",
    )
    @click.option(
        "-o",
        "--output",
        type=click.Path(allow_dash=True, path_type=Path),
        metavar="FILE",  # a directory is refused by outputs.target: one Error line, not a usage error
        help="Write to FILE instead of stdout ('-': stdout, e.g. -f parquet into a pipe).",
    )
    @table_options
    @functools.wraps(fn)
    def wrapper(*args, fmt, output, wide, rows, **kwargs):
        rows_shown = rows
        if fmt == "parquet" and output is None:
            raise click.UsageError("-f parquet needs -o FILE (or -o - into a pipe)")
        # The command's inputs may not be overwritten by its output.
        inputs = [kwargs[k] for k in ("source", "a", "b") if isinstance(kwargs.get(k), str)]
        if output is not None and not render.is_stdout(output):
            outputs.target(output, inputs)  # refuse a device or an input before any work

        def emit(rows) -> None:
            render.render(rows, fmt, out=sys.stdout, path=output, inputs=inputs, **table_style(wide, rows_shown))

        if "emit" in inspect.signature(fn).parameters:
            kwargs["emit"] = emit  # the command streams its rows while its trace is open
        if "output" in inspect.signature(fn).parameters:
            kwargs["output"] = output  # the command writes something other than rows there itself
        result = fn(*args, **kwargs)
        if result is not None:
            emit(result)

    return wrapper


def table_options(fn):
    """--wide and --rows: how much of a table the table format shows."""
    fn = click.option(
        "--rows",
        type=int,
        default=humanize.DEFAULT_ROWS,
        show_default=True,
        help="Rows the table format shows (0: all); the others write every row.",
    )(fn)
    return click.option(
        "--wide", is_flag=True, help="Table format: every column, names uncut (default: fit the terminal)."
    )(fn)


def table_style(wide: bool, rows: int) -> dict:
    """The table format's style: the terminal's width ($COLUMNS when not a terminal, else 100), unless --wide."""
    return {"wide": wide, "rows": rows, "width": humanize.terminal_width(sys.stdout)}


def files_flag() -> bool | None:
    """``--allow-files`` as the library's ``allow_files``: True when given, else None (the library then
    reads $TRACEKIT_ALLOW_FILES). Passed to every trace a command opens, never set in the environment:
    ``main`` runs in its caller's interpreter."""
    ctx = click.get_current_context(silent=True)
    return True if ctx is not None and ctx.find_root().params.get("allow_files") else None


def open_source(
    source: str, cache: bool = True, quiet: bool = False, link: bool = False, select: dict | None = None
) -> api.Trace:
    """A Trace for SOURCE: a .duckdb from ``tracekit load``, a Parquet dataset or raw trace file(s).

    ``link``: the command reads the linked model, so a raw trace not yet
    cached is loaded and linked in one pass (one write of the database).
    ``select``: ``--rank``/``--trace`` (``select_options``), said in a note.
    """
    select = select or {}
    if source == "-":
        trace = _from_stdin(link, select)
    else:
        trace = _open(source, cache, quiet, link, select)
    if trace.selected and not quiet:
        console.note(f"{source}: reading {trace.selected}")
    return trace


def _open(source: str, cache: bool, quiet: bool, link: bool, select: dict) -> api.Trace:
    progress = console.Progress(not quiet)
    waiting = console.Waiting(not quiet, source, "building the cache entry of")
    try:
        # A database links on first use, if a query needs it; a raw trace not yet cached links as it loads.
        link = link and not api.is_database(source)
        if link:
            humanize.preload()  # the tables' drawing code (rich), imported while a build runs
        trace = api.load(
            [source],
            cache=cache,
            progress=progress,
            warn=console.warn,
            link=link,
            waiting=waiting,
            allow_files=files_flag(),
            **select,
        )
    finally:
        progress.close()
        waiting.close()
    notice = console.LinkNotice(not quiet, source)
    link_wait = console.Waiting(not quiet, source, "linking")

    def on_link(starting: bool) -> None:
        notice(starting)
        if not starting:
            link_wait.close()

    trace.on_link = on_link
    trace.on_wait = link_wait
    return trace


def _from_stdin(link: bool, select: dict) -> api.Trace:
    """SOURCE ``-``: one trace (JSON, gzipped or not) read from standard input, loaded in memory."""
    import tempfile

    data = sys.stdin.buffer.read()
    if not data.strip():
        raise TracekitError("-: standard input is empty (pipe a trace: zcat t.json.gz | tracekit stages -)")
    name = "stdin.json.gz" if data[:2] == b"\x1f\x8b" else "stdin.json"
    with tempfile.TemporaryDirectory(prefix="tracekit-stdin-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        return api.load([path], cache=False, warn=console.warn, link=link, allow_files=files_flag(), **select)


def _params(pairs) -> dict[str, str]:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ParameterError(f"parameter {pair!r} is not of the form NAME=VALUE")
        key, value = pair.split("=", 1)
        out[key.strip()] = value
    return out


source_arg = click.argument("source", metavar="SOURCE")
cache_opt = click.option(
    "--no-cache", "no_cache", is_flag=True, help="Re-parse a raw trace instead of using the cache."
)
rules_opt = click.option(
    "--rules",
    "rule_dirs",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    help="Folder of rule CSVs (label_stages.csv, op_stages.csv, kernel_stages.csv, ...) whose rows win over "
    "the shipped ones (repeatable; also $TRACEKIT_RULES_PATH at load time).",
)


def select_options(fn):
    """``--rank`` and ``--trace``: some traces of SOURCE, passed to the command as ``select``."""

    @click.option(
        "--rank",
        "ranks",
        multiple=True,
        metavar="RANKS",
        help="Only these ranks (traces.rank), e.g. 0,3 or 0-7 (repeatable); a Parquet dataset reads only their "
        "partitions. Ids stay those of the whole source.",
    )
    @click.option(
        "--trace",
        "labels",
        multiple=True,
        metavar="LABEL",
        help="Only the trace labelled LABEL (traces.trace; repeatable); with --rank, the traces both select.",
    )
    @functools.wraps(fn)
    def wrapper(*args, ranks, labels, **kwargs):
        return fn(*args, select={"ranks": ",".join(ranks) or None, "traces": labels or None}, **kwargs)

    return wrapper


queries_opt = click.option(
    "--queries",
    "query_dirs",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    help="Extra folder of .sql queries (repeatable; also $TRACEKIT_QUERY_PATH).",
)


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version")
@click.option("--debug", is_flag=True, help="Show the full traceback on errors.")
@click.option(
    "--allow-files",
    is_flag=True,
    help="Let SQL (tracekit sql, named queries) read and write files, e.g. COPY ... TO or read_csv "
    "(off by default; also $TRACEKIT_ALLOW_FILES=1; see docs/safety.md).",
)
def cli(debug, allow_files):
    """Analyze PyTorch profiler (Kineto / Chrome-JSON) traces with SQL.

    SOURCE arguments take a .duckdb written by 'tracekit load' or a raw trace
    (.json, .json.gz, or a directory of them; '-': one trace on standard
    input); raw traces are loaded once and cached (see 'tracekit load --help').

    \b
    Example:
      tracekit load traces/ -o run.duckdb
      tracekit query gpu_timeline run.duckdb
    """
    # --debug is read by main(), which turns errors into one line unless it is given; --allow-files by
    # files_flag(), for every trace a command opens.
    if os.environ.get("TRACEKIT_MEMORY_LIMIT"):  # an error for every command, not only those that build
        sqlsafety.memory_limit(os.environ["TRACEKIT_MEMORY_LIMIT"], "TRACEKIT_MEMORY_LIMIT")


@cli.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="DuckDB file to write (with --parquet: the dataset folder).",
)
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("-q", "--quiet", is_flag=True, help="No progress or summary.")
@click.option(
    "--memory-limit",
    metavar="SIZE",
    help="Cap DuckDB's memory, e.g. 4GB: the load's, or each task's with --jobs, --dask or --parquet (default: "
    "2.5x the uncompressed input, a task's file, at least 512MB; also $TRACEKIT_MEMORY_LIMIT).",
)
@click.option(
    "--link",
    "link_now",
    is_flag=True,
    help="Also build the linked tables (CPU op stacks, launches, attention stages) now: with worker processes "
    "(--jobs N > 1, --dask) each file's in its load task, in one process once over all; by default the first query that needs them builds them and writes them into "
    "OUTPUT. A --parquet dataset is always linked.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    metavar="N",
    help="Worker processes that load (and with --link, link) files in parallel (default: the cores); "
    "1 runs the same one-task-per-file load in this process.",
)
@click.option(
    "--parquet",
    is_flag=True,
    help="Write a Parquet dataset into the folder OUTPUT (one folder per table, partitioned by trace, zstd) "
    "instead of a DuckDB file, the linked tables included (each file is loaded and linked in its own task); "
    "every command reads it as a SOURCE.",
)
@click.option(
    "--dask",
    metavar="ADDRESS",
    help="Run the load tasks on a Dask cluster: tcp://host:8786 or file:SCHEDULER.json (a running scheduler, "
    "its address or the scheduler file dask-jobqueue/dask-mpi write; inputs and OUTPUT on a filesystem "
    "the workers share) or local:N (a LocalCluster of N worker processes). Needs tracekit-attn[dask].",
)
def load(paths, output, force, quiet, memory_limit, link_now, jobs, parquet, dask):
    """Load trace files or directories into a DuckDB database.

    Each file is one trace (a rank, when several); directories are searched
    for *.json and *.json.gz. Several files are parsed by --jobs worker
    processes, one file per task, and merged: the same rows as a load in one
    process. A file that fails does not stop the others: each failure is
    reported by name, OUTPUT holds the traces that loaded, a summary line
    says which failed, and the exit status is non-zero (--jobs 1 too: the
    same tasks, run one after the other in this process).
    The database is written atomically: no half-written OUTPUT is ever left
    behind. Raw traces given to other commands are cached in
    $TRACEKIT_CACHE_DIR (default ~/.cache/tracekit) instead.

    OUTPUT holds every event at once; the linked model (cpu_slices, gpu_ops,
    the stage tables) is built by the first query that names one of its
    tables, once (it is written into OUTPUT), or right away with --link:
    with worker processes each file is linked in its load task, in
    parallel (every linked table is per trace), and the merge renumbers
    the ids.

    \b
    Example:
      tracekit load rank0.json.gz rank1.json.gz -o run.duckdb
      tracekit load profiler_logs/ -o run.duckdb --force --jobs 8
      tracekit load profiler_logs/ -o run_dataset/ --parquet --dask local:8
    """
    from tracekit.store import parallel  # worker processes: imported by the one command that uses them

    if output.exists() and not force:
        raise TracekitError(f"{output}: already exists (use --force to replace it)")
    if memory_limit:  # before --force removes anything
        sqlsafety.memory_limit(memory_limit, "--memory-limit")
    if not parquet:  # a dataset is a folder: _load_dataset checks what --force may replace
        outputs.target(output, paths)  # refuse a device or an input before any work
    progress = console.Progress(not quiet)
    if parquet:
        _load_dataset(paths, output, force, quiet, jobs, dask, progress, memory_limit)
        return
    # Without --force, "already exists" is decided again when the file is put in place (atomically).
    exclusive = contextlib.nullcontext() if force else outputs.create_only(output)
    with _loading(progress, quiet, lambda: api.open(output, allow_files=files_flag()), output, link_now), exclusive:
        if dask:
            from tracekit.store import dataset

            path = parallel.build_file(
                list(paths),
                output,
                progress=progress,
                warn=console.warn,
                memory_limit=memory_limit,
                linked=link_now,
                runner=dataset.dask_runner(dask, progress=progress, note=None if quiet else console.note),
            )
            trace = api.open(path, allow_files=files_flag())
        else:
            trace = api.load(
                list(paths),
                output=output,
                progress=progress,
                warn=console.warn,
                memory_limit=memory_limit,
                link=link_now,
                jobs=jobs or parallel.default_jobs(),
                allow_files=files_flag(),
            )
    if not quiet:
        _load_summary(trace, output, link_now)
    else:
        trace.close()


def _load_dataset(paths, output: Path, force: bool, quiet: bool, jobs, dask, progress, memory_limit) -> None:
    from tracekit.store import dataset

    # Built beside OUTPUT and swapped in at the end: a failure leaves OUTPUT as it was.
    with _loading(progress, quiet, lambda: api.open_dataset(output, allow_files=files_flag()), output, False):
        dataset.build(
            list(paths),
            output,
            jobs=jobs,
            dask=dask,
            warn=console.warn,
            progress=progress,
            memory_limit=memory_limit,
            note=None if quiet else console.note,
            force=force,
        )
    if not quiet:
        _load_summary(api.open_dataset(output, allow_files=files_flag()), output, False)


@contextlib.contextmanager
def _loading(progress, quiet: bool, reopen, output, link_now: bool):
    """Close the progress line after a load; when some files failed, summarise what OUTPUT holds, then fail."""
    from tracekit.store import parallel

    try:
        yield
    except parallel.PartialLoadError:
        progress.close()
        if not quiet:
            _load_summary(reopen(), output, link_now)
        raise
    finally:
        progress.close()


def _load_summary(trace, output, link_now) -> None:
    with trace:
        n, events, gpu = trace.rows("SELECT count(*), sum(events), (SELECT count(*) FROM gpu_op_events) FROM traces")[0]
    state = "linked" if link_now else "linked on first use"
    click.echo(f"{output}: {n} trace(s), {events:,} events, {gpu:,} GPU ops ({state})", err=True)


@cli.command(context_settings=CONTEXT)
@source_arg
@click.argument("sql")
@select_options
@cache_opt
@output_options
def sql(source, sql, no_cache, select, emit):
    """Run a SQL query against SOURCE.

    \b
    Example:
      tracekit sql run.duckdb "SELECT name, count(*) FROM gpu_ops GROUP BY name ORDER BY 2 DESC"
    """
    sqlsafety.statement_text(sql)
    with open_source(source, cache=not no_cache, select=select) as trace:
        emit(trace.batches(sql))


@cli.command(context_settings=CONTEXT)
@click.argument("name")
@source_arg
@click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE", help="Query parameter (repeatable).")
@queries_opt
@rules_opt
@select_options
@cache_opt
@output_options
def query(name, source, params, query_dirs, rule_dirs, no_cache, select, emit):
    """Run the named query NAME against SOURCE.

    'tracekit queries' lists the queries and their parameters.

    \b
    Example:
      tracekit query gpu_timeline run.duckdb -p include_orphans=true
      tracekit query top_kernels trace.json.gz -f csv -o kernels.csv
      tracekit query stragglers job_ds/ --rank 0-7
    """
    named = queries.find(name, query_dirs)
    bound = _params(params)
    named.bind(bound)  # fail on bad parameters before loading anything
    link = api.needs_link(duckdb.connect(), named.sql)
    with open_source(source, cache=not no_cache, link=link, select=select) as trace:
        import pyarrow as pa

        batches = trace.use_rules(rule_dirs).query_batches(named.id, bound, query_dirs)
        counted = [0]

        def counting(reader):
            for batch in reader:
                counted[0] += batch.num_rows
                yield batch

        emit(pa.RecordBatchReader.from_batches(batches.schema, counting(batches)))
        if not counted[0] and named.empty:
            click.echo(f"note: {named.empty}", err=True)
        if "include_orphans" in named.params and not named.bind(bound)["include_orphans"]:
            console.orphan_note(trace.orphans(), "-p include_orphans=true")
        if named.id.startswith("cluster.") and named.id != "cluster.rank_notes":
            console.rank_notes(trace.query("rank_notes").to_dicts())  # why ranks matched what they did


@cli.command(context_settings=CONTEXT)
@source_arg
@click.option("--calls", default=12, show_default=True, help="Attention calls to list (0: all).")
@click.option("--include-orphans", is_flag=True, help="Count GPU ops launched before the trace began.")
@click.option("-f", "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--wide", is_flag=True, help="Every column, names uncut (default: fit the terminal).")
@rules_opt
@select_options
@cache_opt
def stages(source, calls, include_orphans, fmt, wide, rule_dirs, no_cache, select):
    """Where attention time goes: the stage breakdown and the attention calls.

    Runs the stage_breakdown and attention_calls queries; each call's source is
    the user line that issued it (call_sources; with_stack traces). Each GPU op's stage
    comes from a record_function label, else its launching op, else its kernel
    name (the stage_breakdown columns gpu_by_* say which); see
    docs/attribution.md for the rules and how to add your own with --rules.

    \b
    Example:
      tracekit stages run.duckdb
      tracekit stages trace.json.gz --rules my_rules/ -f json
    """
    import json

    from tracekit.analysis import sources

    with open_source(source, cache=not no_cache, link=True, select=select) as trace:
        trace.use_rules(rule_dirs)
        params = {"include_orphans": include_orphans}
        breakdown = trace.query_arrow("stage_breakdown", params)
        call_rows = trace.query_arrow("attention_calls", params)
        call_rows, stacks = sources.with_sources(trace, call_rows)
        from tracekit.analysis.stages import no_attention_notes

        why = no_attention_notes(trace, call_rows)
        if not include_orphans:
            console.orphan_note(trace.orphans(), "--include-orphans")
    total = call_rows.num_rows
    all_calls = call_rows
    issued = sources.summary(call_rows) if stacks else [sources.NO_STACKS]  # every call, before --calls cuts
    if calls and total > calls:
        call_rows = call_rows.slice(0, calls)
    if fmt == "json":
        out = {
            "stage_breakdown": values.records(breakdown),
            "attention_calls": values.records(call_rows),
            "attention_calls_total": total,
            "python_stacks": stacks,
        }
        click.echo(json.dumps(out, indent=1))
        return
    from tracekit.analysis.stages import with_total

    breakdown = with_total(breakdown)  # a total row of attention per trace
    style = table_style(wide, 0)
    keep = [
        "trace",
        "stage",
        "gpu_ops",
        "gpu_ns",
        "share_pct",
        "attention_share_pct",
        "cpu_ns",
        "gpu_by_label",
        "gpu_by_module",
        "gpu_by_op",
        "gpu_by_kernel",
    ]
    # A training trace: each stage's backward GPU time beside its total.
    if any(breakdown.column("backward_gpu_ns").to_pylist()):
        keep.insert(keep.index("share_pct") + 1, "backward_gpu_ns")
    click.echo("Stage breakdown (stage_breakdown)")
    render.render(breakdown if wide else breakdown.select(keep), "table", out=sys.stdout, **style)
    shown = f"first {call_rows.num_rows} of {total}" if call_rows.num_rows < total else f"{total}"
    from tracekit.analysis.stages import call_counts

    click.echo(f"\nAttention calls (attention_calls; {shown}{call_counts(all_calls)})")
    keep = ["trace", "call_id", "impl", "op", "gpu_ops", "gpu_ns", "attention_kernel_ns", "cpu_ns", "tflops_per_s"]
    render.render(call_rows if wide else call_rows.select(keep), "table", out=sys.stdout, **style)
    if total:
        click.echo("\nIssued from (call_sources: the innermost user frame)")
        for line in issued:
            click.echo(f"  {line}")
    for line in why:
        click.echo(line)


@cli.command("report", context_settings=CONTEXT)
@click.argument("sources", nargs=-1, required=True, metavar="SOURCE...")
@click.option(
    "--html",
    "html_path",
    type=click.Path(allow_dash=True, path_type=Path),
    metavar="FILE",
    help="Also write the report as one self-contained HTML page with plots (opens offline); '-': stdout.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(allow_dash=True, path_type=Path),
    metavar="FILE",
    help="Also write every number of the report as JSON; '-': stdout.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress; no terminal report when writing --html or --json.")
@click.option("--all-findings", is_flag=True, help="Also show findings that explain under 1 % of the GPU's time.")
@click.option("--brief", is_flag=True, help="Print only what stands out (the findings), before the paths written.")
@click.option(
    "--critical-path",
    "critical_path",
    is_flag=True,
    help="Add each stage's share of the first ProfilerStep's critical path beside its share of GPU time.",
)
@rules_opt
@select_options
@cache_opt
def report_cmd(sources, html_path, json_path, quiet, all_findings, brief, critical_path, rule_dirs, no_cache, select):
    """Compare attention across traces on one page: headline, findings, plots.

    Each trace of each SOURCE is one column; with several, the first is the
    baseline (time ratios and a stage comparison as in 'tracekit diff'). The
    headline gives attention calls, GPU time per call (op- and kernel-level),
    CPU time, GPU ops, stage shares, tensor-core share, launch API, occupancy,
    TFLOP/s, GPU idle share and the user line that issued the calls (with_stack
    traces); the GPU breakdown (computation,
    communication, memcpy, idle) with the top ops and modules; "what stands
    out" lists the findings (queries/findings/), each once with the traces it
    holds for, ranked by tier (what to fix, where the time goes, reporting
    gaps), then by the first trace it holds for, then by the GPU time it
    explains (under 1 % left out unless --all-findings), each with the query
    that shows its rows; notes say what a trace lacks where a part is empty.
    --critical-path adds each stage's share of the first ProfilerStep's critical
    path beside its share of GPU time (docs/critical_path.md). --rank and
    --trace keep some traces of every SOURCE.
    The Python twin is tracekit.analysis.report.build(traces).

    \b
    Example:
      tracekit report naive.json.gz inplace.json.gz math.json.gz
      tracekit report run.duckdb --html report.html --json report.json
    """
    from rich.console import Console

    from tracekit.analysis import report

    if render.is_stdout(html_path) and render.is_stdout(json_path):
        raise click.UsageError("only one of --html and --json can be '-' (stdout)")
    for path in (html_path, json_path):
        if path is not None and not render.is_stdout(path):
            outputs.target(path, sources)  # refuse a device or an input before any work
    traces = []
    progress = console.Steps(not quiet, "report")
    try:
        for source in sources:
            trace = open_source(source, cache=not no_cache, quiet=quiet, link=True, select=select)
            traces.append(trace.use_rules(rule_dirs))
        built = report.build(
            traces, names=sources, progress=progress, all_findings=all_findings, critical_path=critical_path
        )
    finally:
        progress.close()
        for trace in traces:
            trace.close()
    to_stdout = False
    if brief and not quiet and not (render.is_stdout(html_path) or render.is_stdout(json_path)):
        built.print(Console(highlight=False), html_hint=False, brief=True)
        to_stdout = True  # printed: not again below
    for path, text in ((html_path, built.to_html), (json_path, built.to_json)):
        if render.is_stdout(path):
            sys.stdout.write(text())
            to_stdout = True
        elif path is not None:
            outputs.write_text(path, text(), inputs=sources)
            if not quiet:
                click.echo(f"wrote {path}", err=True)
    if not to_stdout and (not quiet or not (html_path or json_path)):
        built.print(Console(highlight=False, width=humanize.terminal_width(sys.stdout)), html_hint=html_path is None)


@cli.command("diff", context_settings=CONTEXT)
@click.argument("a", metavar="A")
@click.argument("b", metavar="B", required=False)
@click.option(
    "--by",
    type=click.Choice(diff.BY),
    default="stage",
    show_default=True,
    help="Match by attention stage (works across devices and vendors) or by kernel name.",
)
@click.option("--per-call", is_flag=True, help="Divide GPU ops and time by each side's number of attention calls.")
@click.option("--include-orphans", is_flag=True, help="Count GPU ops launched before the trace began.")
@click.option(
    "--gate",
    "gates",
    multiple=True,
    metavar="RULE",
    help="Regression gate (repeatable): METRIC>CHANGE or METRIC<CHANGE, e.g. mask.per_call>+5%, "
    "step_time>+3%, attention.share>+2pt; prints a verdict per rule, exit 0 pass, 1 regression, 2 bad input.",
)
@click.option(
    "--gate-format",
    type=click.Choice(("markdown", "json")),
    default="markdown",
    show_default=True,
    help="The gate's verdicts as a Markdown table (a pull-request comment) or JSON.",
)
@click.option("--alpha", type=float, default=0.05, show_default=True, help="The gate's significance level.")
@click.option(
    "--baseline",
    "baseline_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder holding the last good run: compare the one SOURCE given (as B) with it (docs/gate.md).",
)
@click.option(
    "--update-baseline",
    is_flag=True,
    help="With --baseline: store B as the last good run when every gate passes (or when none is stored yet).",
)
@rules_opt
@cache_opt
@output_options
def diff_cmd(a, b, by, per_call, include_orphans, rule_dirs, no_cache, output, **gate_options):
    """Compare B with the baseline A: GPU ops and time per stage or kernel name.

    One row per stage (or kernel name) with both sides' GPU ops and time, the
    change (added, removed, slower, faster, same), delta_ns = B - A, delta_pct
    and ratio = B / A, sorted by |delta_ns|. A SOURCE holding several traces
    counts them all. By stage, an H100 trace compares with an MI300 one even
    though no kernel name matches; by kernel, names on one side only are
    listed as added or removed. The Python twin is tracekit.diff.compare(a, b).

    With --gate RULE (repeatable) it is a regression gate: a verdict per rule
    (pass or fail, the change and its noise, Welch's t-test over the calls or
    steps), exit status 0 when every rule passes, 1 on a regression, 2 on bad
    input. With --baseline DIR, the one SOURCE is compared with the run stored
    in DIR, and --update-baseline stores it there when it passes (docs/gate.md).
    The Python twin is tracekit.analysis.gate.evaluate(a, b, rules).

    \b
    Example:
      tracekit diff inplace.json.gz math.json.gz --per-call
      tracekit diff h100.json.gz mi300.json.gz --by kernel -f csv -o kernels.csv
      tracekit diff naive.json.gz inplace.json.gz --gate mask.per_call>+5% --gate step_time>+3%
      tracekit diff --baseline nightly/ run.json.gz --gate attention.per_call>+5% --update-baseline
    """
    if gate_options["gates"] or gate_options["baseline_dir"] or gate_options["update_baseline"]:
        _gate(a, b, rule_dirs=rule_dirs, no_cache=no_cache, output=output, **gate_options)
    if b is None:
        raise click.UsageError("missing argument 'B' (one SOURCE alone needs --baseline DIR)")
    with (
        open_source(a, cache=not no_cache, link=True) as trace_a,
        open_source(b, cache=not no_cache, link=True) as trace_b,
    ):
        result = diff.compare(
            diff.Side(trace_a.use_rules(rule_dirs), name=a),
            diff.Side(trace_b.use_rules(rule_dirs), name=b),
            by=by,
            per_call=per_call,
            include_orphans=include_orphans,
        ).arrow()
        if not include_orphans:
            for trace in (trace_a, trace_b):
                console.orphan_note(trace.orphans(), "--include-orphans")
        return result


def _gate(a, b, *, gates, gate_format, alpha, baseline_dir, update_baseline, rule_dirs, no_cache, output) -> NoReturn:
    """diff --gate: the verdicts to stdout (or -o), exit 0 pass, 1 regression, 2 bad input (one Error line)."""
    from tracekit.analysis import gate

    try:
        if update_baseline and not baseline_dir:
            raise gate.GateInputError("--update-baseline needs --baseline DIR")
        if baseline_dir:
            if b is not None:
                raise gate.GateInputError("with --baseline DIR give one SOURCE (the new run), not two")
            b, stored = a, gate.baseline_source(baseline_dir)
            if stored is None:
                if not update_baseline:
                    raise gate.GateInputError(
                        f"{baseline_dir}: no baseline stored yet (seed it with --update-baseline)"
                    )
                gate.store_baseline(baseline_dir, b, None, list(gates))
                click.echo(f"{baseline_dir}: no baseline yet; stored {b} as the first one", err=True)
                raise SystemExit(0)
            a, manifest = str(stored[0]), stored[1]
        elif b is None:
            raise gate.GateInputError("missing argument 'B' (one SOURCE alone needs --baseline DIR)")
        else:
            manifest = {}
        with (
            open_source(a, cache=not no_cache, link=True, quiet=True) as trace_a,
            open_source(b, cache=not no_cache, link=True, quiet=True) as trace_b,
        ):
            result = gate.evaluate(
                diff.Side(trace_a.use_rules(rule_dirs), name=a),
                diff.Side(trace_b.use_rules(rule_dirs), name=b),
                list(gates),
                alpha=alpha,
            )
        result.baseline = manifest
        text = result.to_json() if gate_format == "json" else result.to_markdown()
    except (TracekitError, duckdb.Error, OSError, ValueError) as exc:
        click.echo(f"Error: {error_line(exc)}", err=True)
        raise SystemExit(2) from None
    if output is None or render.is_stdout(output):
        sys.stdout.write(text)
    else:
        outputs.write_text(output, text, inputs=[a, b])
    if update_baseline and not result.failed:
        gate.store_baseline(baseline_dir, b, result, list(gates))
        click.echo(f"{baseline_dir}: stored {b} as the last good run", err=True)
    raise SystemExit(result.exit_code)


@cli.command("queries", context_settings=CONTEXT)
@queries_opt
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("-v", "--verbose", is_flag=True, help="Show descriptions, parameters and columns.")
def list_queries(names, query_dirs, verbose):
    """List the named queries (shipped and user folders), or NAME's doc, parameters and columns.

    \b
    Example:
      tracekit queries -v
      tracekit queries top_kernels
    """
    if names:
        chosen = [queries.find(name, query_dirs) for name in names]  # an unknown name: one Error line
        verbose = True
    else:
        for problem in queries.broken(query_dirs).values():
            console.warn(f"skipped a broken query file: {problem}")
        chosen = sorted(queries.library(query_dirs).values(), key=lambda named: named.id)
    for named in chosen:
        click.echo(f"{named.id:32} {named.title}")
        if verbose:
            if named.description:
                for line in named.description.splitlines():
                    click.echo(f"    {line}")
            for param in named.params.values():
                click.echo(f"    -p {param.name}={param.default}  ({param.type}) {param.doc}")
            for column in named.columns:
                click.echo(f"    {column.name:24} {column.type:10} {column.doc}")
            click.echo("")


@cli.command(context_settings=CONTEXT)
@source_arg
@click.argument("names", nargs=-1, metavar="[TABLE]...")
@click.option("--columns", is_flag=True, help="List the columns of every table (given TABLEs: always).")
@cache_opt
@output_options
def tables(source, names, columns, no_cache):
    """List the tables and views of SOURCE; with TABLE names, their documented columns.

    \b
    Example:
      tracekit tables run.duckdb
      tracekit tables run.duckdb gpu_ops cpu_slices
    """
    import pyarrow as pa

    with open_source(source, cache=not no_cache) as trace:
        known = trace.tables()
    by_name = {table["table"]: table for table in known}
    for name in names:
        if name not in by_name:
            raise TracekitError(
                f"no table {name!r}{queries.suggest(name, by_name)} ('tracekit tables SOURCE' lists them)"
            )
    rows = []
    for table in [by_name[name] for name in names] if names else known:
        if columns or names:
            rows += [
                {"table": table["table"], "kind": table["kind"], "column": column, "type": column_type, "doc": doc}
                for column, column_type, doc in table["columns"]
            ]
        else:
            rows.append(
                {"table": table["table"], "kind": table["kind"], "columns": len(table["columns"]), "doc": table["doc"]}
            )
    return pa.Table.from_pylist(rows)


@cli.command(
    context_settings={**CONTEXT, "ignore_unknown_options": True, "allow_interspersed_args": False},
    add_help_option=True,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def capture(args):
    """Record attention traces on this machine (needs torch): the capture module.

    Passes its arguments to python -m tracekit.capture; commands: attention
    (the post's variants), model (a transformers model) and samples. Run
    'tracekit capture attention -h' for the options.

    \b
    Example:
      tracekit capture attention --impl all --seq 1024 --out traces
    """
    from .capture.cli import main as capture_main

    code = capture_main(list(args))
    if code:
        raise SystemExit(code)


@cli.group(context_settings=CONTEXT, invoke_without_command=True)
@click.pass_context
def cache(ctx):
    """Where raw traces are cached, and its housekeeping (list, clear).

    Raw traces given as SOURCE are loaded once into a database in
    $TRACEKIT_CACHE_DIR (default ~/.cache/tracekit). The cache keeps at most
    $TRACEKIT_CACHE_MAX (default 5GB; 0: no cap): past it, the least recently
    used databases are deleted when a new one is written.

    \b
    Example:
      tracekit cache
      tracekit cache list
      tracekit cache clear --older-than 30
    """
    if ctx.invoked_subcommand is None:
        folder = database.cache_dir()
        entries = database.cache_entries()
        size = sum(entry["size_bytes"] for entry in entries)
        cap = database.cache_max()
        limit = f" of at most {cap / 1e9:,.1f} GB" if cap else " (no cap)"
        click.echo(f"{folder}: {len(entries)} cached database(s), {size / 1e6:,.1f} MB{limit}")


@cache.command("list", context_settings=CONTEXT)
@output_options
def cache_list():
    """List the cached databases: file, size, last use and the traces each holds.

    \b
    Example:
      tracekit cache list
    """
    import datetime

    import pyarrow as pa

    rows = [
        {
            "file": entry["file"],
            "size_bytes": entry["size_bytes"],
            "last_used": datetime.datetime.fromtimestamp(entry["last_used"]).strftime("%Y-%m-%d %H:%M"),
            "traces": len(entry["inputs"]),
            "inputs": ", ".join(entry["inputs"]),
        }
        for entry in database.cache_entries()
    ]
    schema = pa.schema(
        [("file", pa.string()), ("size_bytes", pa.int64()), ("last_used", pa.string()), ("traces", pa.int64())]
        + [("inputs", pa.string())]
    )
    return pa.Table.from_pylist(rows, schema=schema)


@cache.command("clear", context_settings=CONTEXT)
@click.option("--older-than", "days", type=float, metavar="DAYS", help="Only databases unused for DAYS days.")
def cache_clear(days):
    """Delete cached databases (they are rebuilt from the traces when needed).

    \b
    Example:
      tracekit cache clear
      tracekit cache clear --older-than 30
    """
    n, freed = database.cache_clear(days * 86400 if days is not None else None)
    click.echo(f"{database.cache_dir()}: removed {n} cached database(s), {freed / 1e6:,.1f} MB")


@cli.group("export", context_settings=CONTEXT)
def export_group():
    """Write a loaded trace back out for other tools.

    \b
    Example:
      tracekit export perfetto run.duckdb -o run.perfetto.json.gz
    """


@export_group.command("perfetto", context_settings=CONTEXT)
@source_arg
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Chrome JSON file to write (gzipped when it ends in .gz); replaced if it exists.",
)
@click.option(
    "--trace", "label", metavar="LABEL", help="The trace to export when SOURCE holds several (its label: traces.trace)."
)
@click.option(
    "--critical-path",
    "critical_path",
    metavar="REGION[:N]",
    help="Also mark the critical path of region REGION's instance N (default 0; '' the whole trace) on a "
    "'critical path' thread per process (docs/critical_path.md).",
)
@click.option("-q", "--quiet", is_flag=True, help="No summary.")
@rules_opt
@cache_opt
def export_perfetto(source, output, label, critical_path, quiet, rule_dirs, no_cache):
    """Export one trace as Chrome JSON with attention tracks, for the Perfetto UI.

    Writes every original event unchanged (exact timestamps) plus, on each GPU
    (same pid), a thread 'stream N · attention stages' per stream with one
    slice per GPU op named by its attention stage, and a thread 'attention
    calls' with one slice per attention call spanning its GPU work. Open the
    file at https://ui.perfetto.dev. The file is written atomically. Python:
    tracekit.present.export.export_perfetto(trace, path).

    \b
    Example:
      tracekit export perfetto run.duckdb -o run.perfetto.json.gz
      tracekit export perfetto runs/ -o rank1.json.gz --trace rank1
    """
    from tracekit.present import export

    outputs.target(output, [source])  # refuse a device or the input before any work
    path = None if critical_path is None else export.region_instance(critical_path)
    with open_source(source, cache=not no_cache, quiet=quiet) as trace:
        trace_id, label = export.pick_trace(trace.use_rules(rule_dirs), label)
        done = export.export_perfetto(trace, output, trace_id=trace_id, inputs=[source], critical_path=path)
    if not quiet:
        click.echo(
            f"{output}: {label}: {done.events:,} events + {done.stage_events:,} stage slices on "
            f"{done.stage_tracks} stream track(s) + {done.call_events:,} attention call slices"
            + (f" + {done.path_events:,} critical path slices" if critical_path is not None else ""),
            err=True,
        )


# The console script's process. ``main`` is what a Python caller or a test runs (CliRunner,
# ``main([...])``): it returns the exit code and leaves the interpreter and its environment as they
# were. Only ``run``, the ``tracekit`` process itself, sets up that process and ends it.

# polars' allocator (jemalloc) keeps the pages of freed arrays for reuse and hands them back only
# after about 1.5 s of disuse (polars' defaults); a large trace's nesting sweep frees its arrays just
# before the link's largest join, and those pages, still resident, then set the process's peak RSS.
# Returned after 100 ms of disuse they leave before the join, and the sweep's own reuse stays (0 ms
# pays for it in page faults). jemalloc reads the setting once, as polars loads: so the process sets
# it at its start, before anything imports polars, and a value the user set wins. Measured in
# bench/HISTORY.md ("The first answer's peak memory").
POLARS_ALLOCATOR = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:100,muzzy_decay_ms:0")


def run() -> NoReturn:
    """The ``tracekit`` command (console script, ``python -m tracekit``): set up the process,
    run ``main``, then end the process without the interpreter's teardown."""
    os.environ.setdefault(*POLARS_ALLOCATOR)
    _note_interrupts()
    exit_process(main())


def _note_interrupts() -> None:
    """Ctrl-C raises KeyboardInterrupt as by default, and is remembered: whatever error it becomes on the way
    out (DuckDB's "INTERRUPT Error", a load's cleanup failing), ``main`` reports "Interrupted." and 130."""
    import signal

    def interrupted(signum, frame):
        interrupts.note()
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.SIG_DFL):  # not when started ignoring it
        signal.signal(signal.SIGINT, interrupted)


def exit_process(code: int) -> NoReturn:
    """End the ``tracekit`` process with ``code`` without tearing the interpreter down.

    Tearing down the modules a command imported (duckdb, pyarrow, rich, polars) takes longer than
    a short command's answer can afford, after the answer is printed (bench/HISTORY.md, "The
    command's own fixed cost"). The steps of a normal exit that matter are done here first: no
    other thread still running (else the normal exit, which waits for it), the ``atexit``
    callbacks, stdout and stderr flushed (if that fails, the normal exit reports it). Every file
    and database connection is closed by then. Never called by ``main``.
    """
    import atexit
    import threading

    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    os._exit(code)


def _interrupted_exit() -> int:
    """Ctrl-C: one line, exit 130, and no staging folder of this process left (Ctrl-C may land between a
    folder's creation and the cleanup that guards it)."""
    with contextlib.suppress(Exception):
        outputs.clean_staging(mine=True)
    click.echo("Interrupted.", err=True)
    return 130


def main(argv=None) -> int:
    """Entry point: run the CLI; every error, expected or not, ends as one line (``--debug``: the traceback)."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="tracekit", standalone_mode=False)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt) or interrupts.seen():  # click's Abort of a Ctrl-C
            return _interrupted_exit()
        click.echo("Aborted.", err=True)
        return 1
    except KeyboardInterrupt:
        return _interrupted_exit()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except BrokenPipeError:
        # The reader of stdout went away (| head): not an error; keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:
        if interrupts.seen() or isinstance(exc, duckdb.InterruptException):
            return _interrupted_exit()
        if debug:
            traceback.print_exc()
        click.echo(f"Error: {error_line(exc, debug)}", err=True)
        return 1
    if interrupts.seen():  # a Ctrl-C that something caught on the way: still an interrupted command
        return _interrupted_exit()
    return 0


def error_line(exc: BaseException, debug: bool = False) -> str:
    """The one line an error is reported with."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, (QueryError, duckdb.Error)) and first:
        # SQL: DuckDB's whole message, its "Did you mean" / candidates and the caret under the error included.
        return "\n".join(line for line in text.splitlines() if line.strip())
    if isinstance(exc, (TracekitError, duckdb.Error, OSError, ValueError)) and first:
        if isinstance(exc, OSError) and outputs.is_space_error(exc):
            return f"{first} (out of space: free some, or set TMPDIR for the staging copy of a load)"
        if ("Out of Memory Error" in first or "failed to allocate" in first) and "memory cap" not in first:
            env = os.environ.get("TRACEKIT_MEMORY_LIMIT")
            now = f", now {env}" if env else ""
            return (
                f"{first} (out of memory under tracekit's memory cap: raise it with --memory-limit or "
                f"TRACEKIT_MEMORY_LIMIT{now}, or write large results with -o FILE)"
            )
        return first
    if isinstance(exc, MemoryError):
        return (
            "out of memory: write large results with -o FILE (any -f; parquet is smallest), "
            "or lower TRACEKIT_MEMORY_LIMIT"
        )
    if isinstance(exc, RecursionError):
        return "input nested too deeply to process" + ("" if debug else " (rerun with --debug for the traceback)")
    hint = "" if debug else " (rerun with --debug for the traceback)"
    return f"unexpected {type(exc).__name__}" + (f": {first}" if first else "") + hint
