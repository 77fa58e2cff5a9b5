"""Loading many traces at once: tasks of consecutive files in worker processes, then one merge.

Every base table is per trace, so each file is parsed and checked on its own
(``load_part``, or ``load_parts`` for a run of files: a small DuckDB file
holding their rows, numbered from 1 and 0), and the parts are merged in file
order into the output with every id column the schema declares
(``catalog.id_columns``) shifted by what precedes them: the output holds exactly the rows a one-process load of the same files
writes. The merge then runs what needs every trace at once: the views, the
duplicate-rank check, the clock alignment (``ranks``) and, when the model is
wanted, one link over the merged tables. (A Parquet dataset's tasks also link
their file, ``load_part(linked=True)``: its partitions are never merged.)

A file that fails does not stop the others: every failure is reported by name
at the end, the output holds the traces that loaded, and ``PartialLoadError``
says which did not (the CLI exits non-zero). Nothing is written when no file
loads, and the output appears only complete (written beside it, then renamed).
``dataset`` runs the same tasks on a Dask cluster.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import nullcontext
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import duckdb

from tracekit.common import interrupts, lifeline, outputs, sqlmodules, sqlsafety
from tracekit.errors import NotATraceError, TraceFormatError, TracekitError, first_line
from tracekit.ingest import events_table
from tracekit.ingest.sources import Source, discover, trace_labels
from tracekit.schema import catalog
from tracekit.store import database, pipeline


@dataclass(frozen=True)
class PartResult:
    """What one load task did: the part written, or why not."""

    index: int
    path: str
    part: str | None
    skipped: bool = False  # found in a directory but not a trace (a manifest): skipped, as a one-process load does
    error: str | None = None  # the problem, for TraceFormatError(path, error)
    loaded_on: str | None = None
    space: bool = False  # the error is a full disk (or a file-size limit): the whole load stops, not one file


class PartialLoadError(TracekitError):
    """Some files did not load; the output holds the others."""

    def __init__(self, output: Path, loaded: int, failures: list[tuple[str, str]]):
        self.output = output
        self.loaded = loaded
        self.failures = failures
        names = ", ".join(Path(p).name for p, _ in failures)
        super().__init__(
            f"{len(failures)} of {loaded + len(failures)} trace files failed to load ({names}); "
            f"{output} holds the other {loaded}"
        )


def default_jobs() -> int:
    """Worker processes by default: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def load_part(
    index: int,
    path: str,
    label: str,
    from_directory: bool,
    part: str,
    memory_limit: str | None = None,
    threads: int | None = None,
    linked: bool = False,
    export: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> PartResult:
    """Load one trace file into the DuckDB file ``part``: its base tables, and with ``linked`` its
    linked model too (every linked table is per trace).

    With ``export`` no part is written: the trace is loaded (and linked) in memory, spilling
    into ``part``'s folder past the cap, and ``export(con)`` writes its rows where they go
    (``dataset``'s Parquet partitions), so that they are written once.

    Runs in a worker process (or a Dask task); errors come back as data, so
    one bad file never takes the others down.
    """
    from tracekit.ingest.ranks import loaded_on

    try:
        _load([(path, label, from_directory)], part, memory_limit, threads, linked, export)
    except NotATraceError as exc:
        if from_directory:
            return PartResult(index, path, None, skipped=True, loaded_on=loaded_on())
        return PartResult(index, path, None, error=exc.problem, loaded_on=loaded_on())
    except _Skipped:
        return PartResult(index, path, None, skipped=True, loaded_on=loaded_on())
    except TraceFormatError as exc:
        return PartResult(index, path, None, error=exc.problem, loaded_on=loaded_on())
    except (TracekitError, duckdb.Error, OSError, ValueError) as exc:
        first = first_line(exc)
        if isinstance(exc, OSError) and exc.strerror:  # the cause; the warning names the file
            first = "symbolic link loop" if exc.errno == errno.ELOOP else exc.strerror
        return PartResult(index, path, None, error=first, loaded_on=loaded_on(), space=outputs.is_space_error(exc))
    return PartResult(index, path, part, loaded_on=loaded_on())


def load_parts(group: list[tuple], export: Callable | None = None) -> list[PartResult]:
    """One task: the consecutive files of ``group`` (each ``load_part``'s arguments) loaded, and linked, together
    into the first one's part, so that they pay one task's fixed cost (a link runs some 200 statements whatever
    its size: bench/README.md, "One task's fixed cost"); a result per file, all naming that part.

    ``export(con, group)`` (``dataset``'s) writes each file's rows where they go, instead of the part. When
    any file of the group fails or is skipped, each is loaded on its own instead: a bad file fails alone and
    is reported as a task of its own would report it (a full disk stops them all: it is no file's fault).
    """
    from tracekit.ingest.ranks import loaded_on

    index, path, label, from_directory, part, memory_limit, threads, linked = group[0][:8]
    exported = None if export is None else lambda con: export(con, group)
    if len(group) == 1:
        return [load_part(index, path, label, from_directory, part, memory_limit, threads, linked, exported)]
    files = [(path, label, from_directory) for _, path, label, from_directory, *_ in group]
    try:
        _load(files, part, memory_limit, threads, linked, exported)
    except (_Skipped, TracekitError, duckdb.Error, OSError, ValueError) as exc:
        if outputs.is_space_error(exc):
            error = first_line(exc)
            return [PartResult(i, path, None, error=error, loaded_on=loaded_on(), space=True) for i, path, *_ in group]
        return [result for one in group for result in load_parts([one], export)]
    return [PartResult(i, path, part, loaded_on=loaded_on()) for i, path, *_ in group]


class _Skipped(Exception):
    """A file found in a directory that holds no trace (ingest warned): skipped, as a one-process load does."""


def _load(
    files: list[tuple[str, str, bool]],
    part: str,
    memory_limit: str | None,
    threads: int | None,
    linked: bool,
    export: Callable[[duckdb.DuckDBPyConnection], None] | None,
) -> None:
    """Load ``files`` (path, label, found in a directory), in order, into the part (or, with ``export``, into
    memory and out through it); raises what the load raised, ``_Skipped`` when a file was skipped."""
    sources = [Source(Path(path), from_directory) for path, _, from_directory in files]
    skipped: list[str] = []  # ingest's warning that a file, found in a directory, holds no trace
    tmp = Path(part).with_name(Path(part).name + ".tmp")
    try:
        limit = memory_limit or database.auto_memory_limit(sources)
        if export is None:
            con = database.connect_writer(tmp, limit, threads=threads)
        else:
            con = database.connect_writer(":memory:", limit, threads=threads, spill=str(tmp))
        try:
            # No progress bar: a worker's stderr is the terminal of the command that started it.
            con.execute("SET enable_progress_bar = false")
            con.execute("CREATE TABLE tracekit_info (key VARCHAR, value VARCHAR)")
            con.execute("INSERT INTO tracekit_info VALUES ('linked', 'false')")
            events_table.create_tables(con)
            # The folder's labels: which capture labels are unique only the merge can tell.
            labels = [label for _, label, _ in files]
            events_table.ingest(con, sources, labels=labels, warn=skipped.append, relabel=False)
            if skipped:
                raise _Skipped(skipped[0])
            if linked:
                # The base views and macros the model reads; no docs (the merge writes them once). A small
                # file's link commits once, as a one-process build's does (database.build).
                small = con.execute("SELECT coalesce(sum(events_bytes), 0) FROM traces").fetchall()[0][0]
                one = small <= database.ONE_TRANSACTION_BYTES
                with pipeline.transaction(con, commit=database.commit_checkpointed) if one else nullcontext():
                    database.create_views(con)
                    pipeline.build(con, comment=False)
            if export is None:
                con.execute("CHECKPOINT")
            else:
                export(con)
        finally:
            con.close()
        if export is None:
            os.replace(tmp, part)
    except BaseException as exc:
        if export is None:  # the part as far as it got: a load of the same part again starts afresh
            for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
                with contextlib.suppress(OSError):
                    leftover.unlink()
        if skipped and isinstance(exc, TraceFormatError):
            raise _Skipped(skipped[0]) from None
        raise
    finally:
        if export is not None:
            shutil.rmtree(tmp, ignore_errors=True)  # what DuckDB spilled


# A task's files: consecutive files grouped up to this many uncompressed bytes (a task's DuckDB is capped at
# 2.5 times its files': docs/cluster.md, "Sizing"), so that the fixed cost is small against the work.
GROUP_BYTES = 256 << 20


def group_tasks(tasks: list[tuple], workers: int) -> list[list[tuple]]:
    """``tasks`` (one per file, in file order) as the groups one task each loads (``load_parts``): consecutive
    files up to ``GROUP_BYTES`` in all, and, with several workers, at most as many files per group as leave
    two groups per worker (a worker that finishes early takes the next: the load stays balanced)."""
    most = len(tasks) if workers <= 1 else max(1, -(-len(tasks) // (2 * workers)))
    groups: list[list[tuple]] = []
    size = 0
    for task in tasks:
        estimate = database.estimated_bytes(Path(task[1]))
        if groups and len(groups[-1]) < most and size + estimate <= GROUP_BYTES:
            groups[-1].append(task)
            size += estimate
        else:
            groups.append([task])
            size = estimate
    return groups


BASE_TABLES = ("traces", "devices", "events")


def file_size(path: Path) -> int:
    """A file's size for the progress line; 0 when it cannot be read (its load task says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def shifted_column(table: str, name: str, column_type: str, offsets: dict[str, str], alias: str = "") -> str:
    """The value of column ``name`` (of type ``column_type``) of ``table`` moved by the offset of its id space
    (``catalog.id_columns``; ``offsets``: SQL for ``events.id`` and ``traces.trace_id``), element by
    element in a list; the column as it is when it holds no id."""
    column = f"{alias}{name}"
    offset = offsets.get(catalog.id_columns(table).get(name, ""), "0")
    if offset == "0":
        return column
    return f"list_transform({column}, lambda x: x + {offset})" if column_type.endswith("[]") else f"{column} + {offset}"


def shifted(table: str, columns, offsets: dict[str, int]) -> str:
    """The select list of ``table``'s ``columns`` (name, type) with every id column moved by the
    offset of its id space (``offsets``: ``events.id`` and ``traces.trace_id``)."""
    sql = {space: str(int(offset)) for space, offset in offsets.items()}
    return ", ".join(f"{shifted_column(table, name, column_type, sql)} AS {name}" for name, column_type in columns)


def part_tables(con: duckdb.DuckDBPyConnection, database_name: str) -> dict[str, list[tuple[str, str]]]:
    """The tables of a part that a merge (or a dataset's export) carries: the base tables, and the linked
    model's tables (``pipeline.NAMES`` stored as tables) when the part was linked; each with its columns, in order."""
    linked = con.execute(f"SELECT value FROM {database_name}.tracekit_info WHERE key = 'linked'").fetchall()
    wanted = BASE_TABLES + (pipeline.NAMES if linked and linked[0][0] == "true" else ())
    rows = con.execute(
        sqlmodules.text("store/part_columns"),
        [database_name],
    ).fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, column_type in rows:
        if table in wanted:
            out.setdefault(table, []).append((column, column_type))
    return {table: out[table] for table in wanted if table in out}


def merge(con: duckdb.DuckDBPyConnection, parts: list[str]) -> None:
    """Append the parts' base tables to ``con`` in order, with the id columns the schema declares
    (``catalog.id_columns``) shifted by the events and traces before the part: the rows a one-process
    load of the same files writes."""
    traces, events = con.execute("SELECT (SELECT count(*) FROM traces), (SELECT count(*) FROM events)").fetchall()[0]
    con.execute("SET preserve_insertion_order = false")
    try:
        for part in parts:
            con.execute("ATTACH ? AS _part (READ_ONLY)", [part])
            try:
                offsets = {"events.id": int(events), "traces.trace_id": int(traces)}
                for table, columns in part_tables(con, "_part").items():
                    select = shifted(table, columns, offsets)
                    con.execute(f"INSERT INTO {table} SELECT {select} FROM _part.{table}")
                part_traces, part_events = con.execute(
                    "SELECT (SELECT count(*) FROM _part.traces), (SELECT count(*) FROM _part.events)"
                ).fetchall()[0]
            finally:
                con.execute("DETACH _part")
            traces += part_traces
            events += part_events
    finally:
        con.execute("RESET preserve_insertion_order")


def write_merged(
    out: Path,
    sources: list[Source],
    parts: list[str],
    memory_limit: str | None = None,
    linked: bool = False,
    warn: Callable[[str], None] | None = None,
) -> None:
    """Write the database ``out`` from loaded parts, atomically (``outputs.replacing``)."""
    limit = memory_limit or database.auto_memory_limit(sources)
    with outputs.replacing(out, inputs=[s.path for s in sources]) as tmp:
        con = database.connect_writer(tmp, limit, merge=True)
        try:
            con.execute("CREATE TABLE tracekit_info (key VARCHAR, value VARCHAR)")
            events_table.create_tables(con)
            merge(con, parts)
            events_table.capture_labels(con)  # over every trace: unique among all of them
            database.finish(con, warn)
            database.comment(con)
            database.write_info(con, sources)
            if linked:
                pipeline.build(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()


Runner = Callable[[list[tuple]], list[PartResult]]


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now (Ctrl-C, an error): pending tasks cancelled, running workers killed and reaped, not
    awaited, and the staging folders they had in TMPDIR removed."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=1)
    # The pool's manager thread sees its workers gone and closes its wakeup pipe. Waited for here: else the
    # interpreter's exit may wake it (concurrent.futures' _python_exit) just as it closes the pipe, and print
    # "OSError: Bad file descriptor" after our "Interrupted." (a race in CPython 3.11's _ThreadWakeup).
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None:
        with contextlib.suppress(Exception):
            manager.join(timeout=2)
    outputs.clean_staging()


def run_local(
    jobs: int,
    progress=None,
    sizes: dict[str, int] | None = None,
    task: Callable[[list[tuple]], list[PartResult]] = load_parts,
) -> Runner:
    """Run load tasks (``task``: ``load_parts``, or ``dataset``'s) in ``jobs`` worker processes (here when 1),
    the files grouped by ``group_tasks``."""

    def run(tasks: list[tuple]) -> list[PartResult]:
        total = sum((sizes or {}).values())
        done = 0
        results: list[PartResult] = []
        groups = group_tasks(tasks, jobs)
        if jobs <= 1:
            for group in groups:
                if progress:
                    progress(done, total, group[0][1], files=(len(results), len(tasks)))
                results.extend(task(group))
                done += sum((sizes or {}).get(args[1], 0) for args in group)
            return results
        # spawn: a fresh interpreter per worker, never a fork of a process that has DuckDB threads.
        # Each worker dies with this process (die_with_parent); on Ctrl-C or an error the pool is stopped,
        # not waited for.
        with lifeline.workers_die_with_me():  # the resource tracker starts with the pool, the workers at the submits
            pool = ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=get_context("spawn"),
                initializer=lifeline.worker_init,
                initargs=(os.getpid(),),
            )
        try:
            with lifeline.workers_die_with_me():
                futures = [pool.submit(task, group) for group in groups]
            for future in as_completed(futures):
                finished = future.result()
                results.extend(finished)
                done += sum((sizes or {}).get(result.path, 0) for result in finished)
                if progress:
                    progress(done, total, finished[-1].path, files=(len(results), len(tasks)))
        except BaseException:
            _stop(pool)
            raise
        pool.shutdown(wait=True)
        return results

    return run


def build_file(
    paths,
    out: Path,
    jobs: int | None = None,
    progress=None,
    warn: Callable[[str], None] | None = None,
    memory_limit: str | None = None,
    linked: bool = False,
    runner: Runner | None = None,
) -> Path:
    """Load ``paths`` into the DuckDB file ``out``, a task per group of files (``group_tasks``), then merge.

    ``jobs`` worker processes (default: the cores); ``runner`` runs the tasks
    elsewhere (``dataset``'s Dask runner). With ``linked`` the merged database
    is linked once, in this process: linking each file in its task and merging
    the linked rows costs more, in CPU and in time, than one link over the
    merged base tables (bench/README.md, "Cluster load"). A Parquet dataset
    (``dataset``) is where the tasks link: nothing is merged there.
    Raises ``PartialLoadError`` after
    writing ``out`` when some files failed, ``TraceFormatError`` (nothing
    written) when none loaded.
    """
    out = database.duckdb_path(Path(out))
    if memory_limit:
        memory_limit = sqlsafety.memory_limit(memory_limit, "--memory-limit")  # as database.build_file checks it
    sources = discover(paths)
    outputs.target(out, [s.path for s in sources])  # as database.build_file checks it, but before any work
    jobs = min(jobs or default_jobs(), len(sources))
    labels = trace_labels([s.path for s in sources])
    # Tagged like outputs' temporary files: the parts a killed load left go with the next load here.
    outputs.clean_leftovers(out.parent)
    tmp = outputs.temp_name(out)
    work = tmp.with_name(tmp.name + ".parts")
    work.mkdir()
    try:
        threads = max(1, default_jobs() // max(jobs, 1))
        tasks = [
            (i, str(s.path), label, s.from_directory, str(work / f"{i:06d}.duckdb"), memory_limit, threads, False)
            for i, (s, label) in enumerate(zip(sources, labels))
        ]
        run = runner or run_local(jobs, progress, {str(s.path): file_size(s.path) for s in sources})
        results = sorted(run(tasks), key=lambda r: r.index)
        return _finish(out, sources, results, warn, memory_limit, linked)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _finish(out, sources, results: list[PartResult], warn, memory_limit, linked) -> Path:
    interrupts.check()  # a Ctrl-C that a library caught: nothing is written either
    loaded = loaded_parts(sources, results, warn, out)
    parts = list(dict.fromkeys(str(r.part) for r in loaded))  # a group's files share their part
    write_merged(out, sources, parts, memory_limit, linked, warn)
    raise_partial(out, loaded, results, warn)
    return out


def loaded_parts(sources, results: list[PartResult], warn, out=None) -> list[PartResult]:
    """The results that loaded; warns of the skipped files, raises when none loaded (nothing is written then)
    or when a task ran out of disk (``out`` not written: a full disk is no one file's failure)."""
    for result in results:
        if result.space:
            where = out if out is not None else result.path
            raise outputs.space_error(Path(where), OSError(result.error or "no space left on device"))
    skipped = [r.path for r in results if r.skipped]
    if skipped and warn:
        warn(f"skipped {len(skipped)} JSON file(s) without trace events: " + ", ".join(skipped))
    loaded = [r for r in results if r.part]
    if not loaded:
        failures = _failures(results)
        if len(failures) == 1:
            raise TraceFormatError(*failures[0])
        if failures:
            for path, problem in failures:
                if warn:
                    warn(f"{path}: {problem}")
            raise TracekitError(f"none of the {len(failures)} trace files loaded (listed above); nothing written")
        raise TraceFormatError(sources[0].path.parent if len(sources) > 1 else sources[0].path, "no traces to load")
    return loaded


def raise_partial(out, loaded: list[PartResult], results: list[PartResult], warn) -> None:
    """After ``out`` is written: each failure warned by name, then ``PartialLoadError`` (when any)."""
    failures = _failures(results)
    if failures:
        for path, problem in failures:
            if warn:
                warn(f"{path}: {problem}")
        raise PartialLoadError(out, len(loaded), failures)


def _failures(results: list[PartResult]) -> list[tuple[str, str]]:
    return [(r.path, r.error or "failed") for r in results if r.error is not None]
