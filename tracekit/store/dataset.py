"""Past one machine: Parquet datasets, and load tasks on a Dask cluster.

``tracekit load SOURCES -o OUT/ --parquet`` writes a dataset: one folder per
table, the base tables (``traces``, ``devices``, ``events``) and the linked
model's (``cpu_slices``, ``gpu_ops``, ... ``attention_calls``), partitioned by
trace (``events/trace_id=3/data.parquet``, zstd; the ``rule_*`` tables, the
same for every trace, once), and the manifest ``tracekit_dataset.json``,
written last. A load-and-link task (``load_parts_parquet``) takes a run of
consecutive files (``parallel.group_tasks``): it parses and links them in an
in-memory DuckDB of its own and writes each file's partitions into a staging
folder, renamed into place whole, so a task that dies (and is retried) leaves
nothing half written and nothing large passes through the scheduler.
The commit then numbers the traces in file order, aligns the ranks' clocks
(over the communication kernels only) and writes the ``traces`` partitions and
the manifest. A folder without its manifest is not a dataset.

Opening a dataset (``connect``; ``tracekit.api.open_dataset`` for a ``Trace``) gives a connection whose tables are DuckDB
views over the Parquet files, with the ids a one-process load would have
given (each trace's ids are numbered from 0 in its partitions and every id
column, ``tables.id_columns``, is shifted by the events of the traces before
it): every query answers with the same rows as over a ``.duckdb`` of the same
traces. A dataset written without the linked tables is linked on first use,
in memory.

``--dask ADDRESS`` runs the tasks on a Dask cluster (``tcp://host:8786``, the
scheduler file of ``dask scheduler --scheduler-file``, dask-jobqueue or dask-mpi
as ``file:PATH``, or ``local:N`` for a ``LocalCluster`` of N worker processes);
the inputs and the output folder must be on a filesystem the workers share. A
task whose worker dies runs again on another; a load that cannot finish writes
nothing (docs/cluster.md). Dask is the optional extra
``tracekit-attn[dask]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import duckdb

from tracekit import __version__
from tracekit.common import interrupts, lifeline, outputs, sqlsafety
from tracekit.common.sqltext import insert_rows, literal
from tracekit.errors import TraceFormatError, TracekitError, first_line
from tracekit.ingest import events_table
from tracekit.ingest.sources import discover, trace_labels
from tracekit.schema import catalog
from tracekit.store import database, parallel, pipeline, selection

MANIFEST = "tracekit_dataset.json"
TABLES = ("traces", "devices", "events")
STAGING = ".staging"
FORMAT = "tracekit-parquet-dataset"


def is_dataset(path) -> bool:
    """True when ``path`` is a dataset folder (its manifest written)."""
    return (Path(path) / MANIFEST).is_file()


def _copy(con, sql: str, path: Path) -> None:
    con.execute(f"COPY ({sql}) TO {literal(str(path))} (FORMAT parquet, COMPRESSION zstd)")


def load_parts_parquet(group: list[tuple]) -> list[parallel.PartResult]:
    """One task: load and link the consecutive files of ``group`` (each ``index, path, label, from_directory,
    out_dir, memory_limit``) together (``parallel.load_parts``) and write each file's partitions under
    ``out_dir``/.staging/NNNNNN (atomically), DuckDB capped at ``memory_limit`` (default: as
    ``parallel.load_part``'s).

    Every table is written for each file: the base tables and the linked
    model's, each with the columns and types it has (``columns.json``: Parquet
    does not keep DuckDB's JSON type), ids numbered as a part of that file
    alone numbers them. The task's DuckDB is in memory (spilling into the
    staging folder past the cap): its rows are written once, as the partitions.
    """
    staging = Path(group[0][4]) / STAGING
    tmps = {index: staging / f"{index:06d}.{os.getpid()}.tmp" for index, *_ in group}
    for tmp in tmps.values():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)

    def export(con, members: list[tuple]) -> None:
        # Straight from the task's in-memory database: the rows are written once, as Parquet, file by file.
        tables = parallel.part_tables(con, con.execute("SELECT current_database()").fetchall()[0][0])
        for trace_id, member in enumerate(members, start=1):
            tmp = tmps[member[0]]
            # The file's ids as its own part numbers them: events from 0, traces from 1.
            first = con.execute("SELECT coalesce(min(id), 0) FROM events WHERE trace_id = ?", [trace_id]).fetchall()
            offsets = {"events.id": -int(first[0][0]), "traces.trace_id": 1 - trace_id}
            for table, columns in tables.items():
                # trace_id is the partition folder's (set at commit), not a column of the files.
                kept = [(name, kind) for name, kind in columns if name != "trace_id"]
                where = f" WHERE trace_id = {trace_id}" if len(kept) < len(columns) else ""
                _copy(
                    con,
                    f"SELECT {parallel.shifted(table, kept, offsets)} FROM {table}{where}",
                    tmp / f"{table}.parquet",
                )
                _fault("part")
            (tmp / "columns.json").write_text(json.dumps(tables))

    try:
        results = parallel.load_parts(
            [
                (i, path, label, from_dir, str(tmps[group[0][0]] / "part"), limit, 1, True)
                for i, path, label, from_dir, _, limit in group
            ],
            export,
        )
        placed = []
        for result in results:
            if result.part is None:
                placed.append(result)
                continue
            final = staging / f"{result.index:06d}"
            shutil.rmtree(final, ignore_errors=True)  # a retried task's earlier, complete attempt
            os.replace(tmps[result.index], final)
            placed.append(parallel.PartResult(result.index, result.path, str(final), loaded_on=result.loaded_on))
        return placed
    finally:
        for tmp in tmps.values():
            shutil.rmtree(tmp, ignore_errors=True)


def _local_cluster(workers: int, scratch: str):
    """A LocalCluster of ``workers`` processes that end with this one, even killed: the environment set just
    before each spawn names this process, and the worker arms itself as it starts (lifeline's dask_setup)."""
    import dask
    from dask.distributed import LocalCluster

    spawn_env = {**dask.config.get("distributed.nanny.pre-spawn-environ", {}), **lifeline.spawn_environ()}
    preload = [*dask.config.get("distributed.worker.preload", []), "tracekit.common.lifeline"]
    settings = {
        "distributed.nanny.pre-spawn-environ": spawn_env,
        "distributed.worker.preload": preload,
        "temporary-directory": scratch,
    }
    with dask.config.set(settings):
        return LocalCluster(
            # (":0": a free port, printed as a note; None does not turn the dashboard off but takes 8787, which a
            # second load's cluster then finds taken)
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            local_directory=scratch,
        )


def _kill_local_workers() -> None:
    """Kill this process's worker processes (a local cluster's), quietly: their shutdown noise is no error."""
    import logging
    import multiprocessing

    for name in ("distributed", "asyncio", "tornado"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    for process in multiprocessing.active_children():
        process.kill()
    with contextlib.suppress(Exception):  # nor closed again, with their workers gone, by Dask's atexit hook
        from distributed.deploy.spec import SpecCluster

        for cluster in list(SpecCluster._instances):
            cluster.shutdown_on_close = False


def _dask_client(address: str):
    """A Dask client for ``address`` (``local:N``, ``tcp://host:port``, ``file:SCHEDULER.json``), the
    LocalCluster it started (None for a running cluster's) and that cluster's scratch folder (a staging folder
    of this process, removed after, or by the next load when this one is killed; None without a cluster)."""
    try:
        from dask.distributed import Client
    except ImportError:
        raise TracekitError("--dask needs Dask: pip install 'tracekit-attn[dask]' (dask and distributed)") from None
    if address.startswith("local:"):
        try:
            workers = int(address.split(":", 1)[1])
        except ValueError:
            raise TracekitError(f"bad --dask address {address!r}: {DASK_ADDRESSES}") from None
        scratch = tempfile.mkdtemp(prefix=outputs.stage_prefix())
        try:
            cluster = _local_cluster(workers, scratch)
        except BaseException:  # Ctrl-C mid-start: the half-started workers killed, quietly, as after the start
            _kill_local_workers()
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        return Client(cluster), cluster, scratch
    try:
        if address.startswith("file:"):
            # The scheduler file that 'dask scheduler --scheduler-file', dask-jobqueue or dask-mpi writes.
            scheduler_file = Path(address[len("file:") :]).expanduser()
            if not scheduler_file.is_file():
                raise TracekitError(f"{scheduler_file}: no such Dask scheduler file (--dask {address})")
            return Client(scheduler_file=str(scheduler_file)), None, None
        if "://" not in address:
            raise TracekitError(f"bad --dask address {address!r}: {DASK_ADDRESSES}")
        return Client(address), None, None
    except (OSError, TimeoutError) as exc:
        raise TracekitError(f"cannot reach the Dask scheduler at {address}: {exc}") from None


DASK_ADDRESSES = "use local:N, tcp://host:port or file:SCHEDULER_FILE"


def dashboard(client) -> str | None:
    """The address of the Dask dashboard the scheduler serves, or None (it serves none)."""
    try:
        port = client.scheduler_info()["services"].get("dashboard")
    except (KeyError, AttributeError, OSError):
        return None
    if not port:
        return None
    host = client.scheduler.address.split("://", 1)[-1].rsplit(":", 1)[0]
    return f"http://{host}:{port}/status"


def dask_runner(
    address: str,
    out_dir: Path | None = None,
    progress=None,
    note: Callable[[str], None] | None = None,
) -> parallel.Runner:
    """A runner of load tasks on the Dask cluster at ``address`` (``local:N``, ``tcp://host:port`` or
    ``file:SCHEDULER_FILE``): with ``out_dir``, ``build``'s tasks (``load_parts_parquet``), else
    ``parallel``'s (``parallel.load_parts``), a task per group of files (``parallel.group_tasks``). ``progress(bytes done, bytes, path, files=(done, total))`` as
    tasks finish; ``note`` gets the dashboard's address when the scheduler serves one.

    A task whose worker dies is run again on another (Dask reschedules it; a task that kills
    ``distributed.scheduler.allowed-failures`` workers fails the load). Paths are made absolute: a
    worker of a running cluster has a working directory of its own.
    """

    def run(tasks: list[tuple]) -> list[parallel.PartResult]:
        tasks = [(t[0], os.path.abspath(t[1]), *t[2:4], os.path.abspath(t[4]), *t[5:]) for t in tasks]
        client, cluster, scratch = _dask_client(address)  # first: it says when Dask is missing
        from dask.distributed import as_completed

        try:
            interrupts.check()  # Ctrl-C while the cluster started, which distributed may have caught
            if note and (link := dashboard(client)):
                note(f"Dask dashboard: {link}")
            task = load_parts_parquet if out_dir is not None else parallel.load_parts
            # One task per group of files (parallel.group_tasks, by the cluster's worker threads), retried when
            # it raises; results are small (paths, errors).
            threads = sum(client.nthreads().values()) or 1
            groups = parallel.group_tasks(tasks, threads)
            futures = client.map(task, groups, retries=2, pure=False)
            sizes = {t[1]: parallel.file_size(Path(t[1])) for t in tasks}
            total = sum(sizes.values())
            done_bytes = 0
            results = []
            try:
                for future in as_completed(futures):
                    interrupts.check()
                    finished = future.result()
                    results.extend(finished)
                    done_bytes += sum(sizes.get(result.path, 0) for result in finished)
                    if progress:
                        progress(done_bytes, total, finished[-1].path, files=(len(results), len(tasks)))
            except Exception as exc:  # a task that killed its workers (KilledWorker), a lost scheduler
                client.cancel(futures)
                first = first_line(exc)
                raise TracekitError(
                    f"the Dask cluster at {address} could not finish the load ({type(exc).__name__}: {first}); "
                    "nothing was written"
                ) from None
        except BaseException:
            if cluster is not None:  # Ctrl-C, an error: the local workers are killed, not asked to finish
                _kill_local_workers()
            for close in (client, cluster):
                with contextlib.suppress(Exception):
                    if close is not None:
                        close.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise
        client.close()
        if cluster is not None:
            cluster.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        return results

    return run


def is_stale(path) -> bool:
    """True when ``path`` is what a killed load of an older tracekit left: a folder without the manifest
    holding nothing but a dataset's parts (the staging folder, table folders). ``--force`` replaces it."""
    path = Path(path)
    try:
        names = {entry.name for entry in os.scandir(path)}
    except OSError:
        return False
    return bool(names) and MANIFEST not in names and names <= {STAGING, *catalog.TABLES}


def replaceable(path) -> bool:
    """What ``--force`` may replace: a dataset, or a killed load's leftover folder."""
    return is_dataset(path) or is_stale(path)


def build(
    paths,
    out_dir: Path,
    jobs: int | None = None,
    dask: str | None = None,
    warn: Callable[[str], None] | None = None,
    progress=None,
    memory_limit: str | None = None,
    force: bool = False,
    note: Callable[[str], None] | None = None,
) -> Path:
    """Write the Parquet dataset of ``paths`` into the folder ``out_dir``; each task's DuckDB is capped at
    ``memory_limit`` (default: 2.5x its file, as for a ``.duckdb``).

    The dataset is built in a folder beside ``out_dir`` (a temporary name, as
    ``outputs``' files: a killed load's is removed by the next) and put in
    place whole at the end (``outputs.publish_folder``): an existing
    ``out_dir`` is replaced only with ``force`` and only when it is a dataset
    (or a killed load's leftover), and on any failure it is left as it was.
    ``note`` gets what a Dask run has to say (its dashboard's address).
    """
    out_dir = Path(out_dir)
    if memory_limit:
        memory_limit = sqlsafety.memory_limit(memory_limit, "--memory-limit")  # one error, before any task
    _check_target(out_dir, force)
    sources = discover(paths)
    labels = trace_labels([s.path for s in sources])
    outputs.clean_leftovers(out_dir.parent)
    work = outputs.temp_name(out_dir)
    try:
        work.mkdir()
    except OSError as exc:
        raise TracekitError(f"{out_dir}: cannot write there ({exc.strerror or exc})") from None
    tasks = [
        (i, str(s.path), label, s.from_directory, str(work), memory_limit)
        for i, (s, label) in enumerate(zip(sources, labels))
    ]
    # (a file that cannot be read counts 0 here; its task names it)
    sizes = {str(s.path): parallel.file_size(s.path) for s in sources}
    try:
        if dask:
            results = dask_runner(dask, work, progress, note)(tasks)
        else:
            workers = min(jobs or parallel.default_jobs(), len(tasks))
            results = parallel.run_local(workers, progress, sizes, task=load_parts_parquet)(tasks)
        results = sorted(results, key=lambda r: r.index)
        interrupts.check()  # a Ctrl-C that a library caught: nothing is written either
        parts = parallel.loaded_parts(sources, results, warn, out_dir)
        _commit(work, sources, parts, warn)
        shutil.rmtree(work / STAGING, ignore_errors=True)
        _fault("publish")
        outputs.publish_folder(work, out_dir, force, replaceable, "a tracekit dataset")
    except Exception as exc:
        if outputs.is_space_error(exc):
            raise outputs.space_error(out_dir, exc) from None
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    parallel.raise_partial(out_dir, parts, results, warn)
    return out_dir


def _check_target(out_dir: Path, force: bool) -> None:
    """Before any work, what the final swap decides again: may ``out_dir`` be written (or replaced)?"""
    if not out_dir.parent.is_dir():
        raise TracekitError(f"{out_dir}: directory {out_dir.parent} does not exist")
    if not out_dir.exists() or (out_dir.is_dir() and not any(out_dir.iterdir())):
        return
    if not force:
        raise outputs.exists_error(out_dir)
    if not out_dir.is_dir() or not replaceable(out_dir):
        raise TracekitError(f"{out_dir}: not a tracekit dataset; --force replaces only a tracekit dataset")


def _fault(point: str) -> None:
    """A deterministic fault for tests: ``TRACEKIT_FAULT=enospc@POINT`` fails there as a full disk does."""
    if os.environ.get("TRACEKIT_FAULT") == f"enospc@{point}":
        import errno

        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _commit(out_dir: Path, sources, parts: list[parallel.PartResult], warn) -> None:
    """Number the traces, move the partitions into place, align clocks, write traces and the manifest.

    The tables with a trace id (``tables.id_columns``) are partitioned by
    trace; the others (the ``rule_*`` tables: the same for every trace) are
    written once, from the first part. The manifest records every table's
    columns, and the linked model's tables only when every part was linked.
    """
    entries: list[dict] = []
    id_base = 0
    part_columns = [json.loads((Path(str(part.part)) / "columns.json").read_text()) for part in parts]
    linked = all(set(pipeline.NAMES) & set(of_part) for of_part in part_columns)
    tables = {table: columns for table, columns in part_columns[0].items() if table not in pipeline.NAMES or linked}
    con = duckdb.connect()
    try:
        for trace_id, part in enumerate(parts, start=1):
            staged = Path(str(part.part))
            counted = con.execute(
                f"SELECT count(*) FROM read_parquet({literal(str(staged / 'events.parquet'))})"
            ).fetchall()
            events = int(counted[0][0])
            for table in tables:
                if table == "traces":
                    continue  # renumbered and clock-aligned below
                if catalog.per_trace(table):
                    dest = out_dir / table / f"trace_id={trace_id}"
                elif trace_id == 1:
                    dest = out_dir / table
                else:
                    continue
                dest.mkdir(parents=True, exist_ok=True)
                os.replace(staged / f"{table}.parquet", dest / "data.parquet")
                _fault("commit")
            entries.append(
                {"trace_id": trace_id, "path": part.path, "id_base": id_base, "events": events, "staged": str(staged)}
            )
            id_base += events
        # The traces rows, renumbered; then what needs every trace: views, duplicate ranks, clocks.
        con.execute(f"CREATE TABLE traces ({catalog.ddl('traces')})")
        for entry in entries:
            staged_traces = literal(str(Path(entry["staged"]) / "traces.parquet"))
            con.execute(
                f"INSERT INTO traces SELECT {int(entry['trace_id'])} AS trace_id, * FROM read_parquet({staged_traces})"
            )
        # One label rule for every load path: a capture's traces take their impl as a .duckdb load gives them.
        events_table.capture_labels(con)
        _base_views(con, out_dir, entries, traces_table=True)
        database.finish(con, warn)
        for entry in entries:
            dest = out_dir / "traces" / f"trace_id={entry['trace_id']}"
            dest.mkdir(parents=True, exist_ok=True)
            _copy(
                con,
                f"SELECT * EXCLUDE (trace_id) FROM traces WHERE trace_id = {entry['trace_id']}",
                dest / "data.parquet",
            )
    finally:
        con.close()
    manifest = {
        "format": FORMAT,
        "schema_version": database.SCHEMA_VERSION,
        "tracekit_version": __version__,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "inputs": [str(s.path) for s in sources],
        "traces": [{key: entry[key] for key in ("trace_id", "path", "id_base", "events")} for entry in entries],
        "linked": linked,
        "tables": tables,
        # The tables whose every partition has the same columns, in the same order and of the same types:
        # their views read the files by position (union_by_name = false), binding on one file's schema.
        "uniform": [table for table in tables if all(of_part.get(table) == tables[table] for of_part in part_columns)],
    }
    outputs.write_text(out_dir / MANIFEST, json.dumps(manifest, indent=1))


# Each trace's ids are numbered from 0 in its partitions: shifted by the events before it. A
# partition's trace_id is the final one already (its folder's, renumbered at commit); other
# columns of trace ids count from 1 in the part.
_PARTITION_OFFSETS = {"events.id": "b.id_base", "traces.trace_id": "b.trace_id - 1"}


def _column(table: str, name: str, column_type: str) -> str:
    """A column of a view over the partitions, its ids those of a one-process load of the traces."""
    if name == "trace_id":
        value = f"p.{name}"
    else:
        value = parallel.shifted_column(table, name, column_type, _PARTITION_OFFSETS, "p.")
    # The recorded types: Parquet keeps values, not DuckDB's JSON alias or INTEGER widths.
    return f"CAST({value} AS {column_type}) AS {name}"


def _base_views(
    con,
    out_dir: Path,
    entries: list[dict],
    traces_table: bool = False,
    tables: dict | None = None,
    uniform: Iterable[str] = (),
) -> None:
    """Views over the partitions of the traces ``entries`` (the manifest's, all or some) with the columns of
    the tables, in their order: the base tables' as the schema declares them, and ``tables`` (name:
    [[column, type], ...], the manifest's).

    The partitions are listed, not globbed: a view over some traces opens only their files. (A filter on
    ``trace_id`` over every partition prunes too, DuckDB's hive partition filter seeing through the CAST;
    a filter on ``traces.rank`` prunes only where a join's filter reaches the scan at run time.)

    The tables named ``uniform`` (the manifest's: every partition with the same columns) are read by
    position, the others by name: binding a view then reads one file's schema, not every file's (on 64
    ranks, 0.4 s less per query: bench/README.md, "Queries on a dataset").
    """
    uniform = set(uniform)
    con.execute("CREATE OR REPLACE TEMP TABLE _id_base (trace_id INTEGER, id_base BIGINT)")
    insert_rows(con, "_id_base", [(entry["trace_id"], entry["id_base"]) for entry in entries])
    views = {table: [(c.name, c.type) for c in catalog.TABLES[table].columns] for table in TABLES}
    views.update({table: columns for table, columns in (tables or {}).items() if table not in TABLES})
    for table, columns in views.items():
        if table == "traces" and traces_table:
            continue
        selected = ", ".join(_column(table, name, column_type) for name, column_type in columns)
        if catalog.per_trace(table):
            files = [str(out_dir / table / f"trace_id={entry['trace_id']}" / "data.parquet") for entry in entries]
            listed = f"[{', '.join(map(literal, files))}]"
            by_name = "false" if table in uniform else "true"
            source = f"read_parquet({listed}, hive_partitioning = true, union_by_name = {by_name}) p"
            source += " JOIN _id_base b USING (trace_id)"
        else:
            source = f"read_parquet({literal(str(out_dir / table / 'data.parquet'))}) p"
        con.execute(f"CREATE VIEW {table} AS SELECT {selected} FROM {source}")
    events_table.phase_views(con)


def trace_rows(path) -> list[tuple[int, str, int | None]]:
    """(trace_id, label, rank) of every trace of the dataset folder ``path``: its ``traces`` partitions, read
    alone (one row each)."""
    files = literal(str(Path(path) / "traces" / "*" / "data.parquet"))
    con = duckdb.connect()
    try:
        rows = con.execute(
            f"SELECT CAST(trace_id AS INTEGER), trace, rank FROM read_parquet({files}, hive_partitioning = true) "
            "ORDER BY 1"
        ).fetchall()
    finally:
        con.close()
    return [tuple(row) for row in rows]


def connect(path, select: selection.Selection | None = None) -> tuple[duckdb.DuckDBPyConnection, Path]:
    """An in-memory DuckDB connection over a dataset folder: its tables as views over the Parquet files (a
    dataset written without the linked tables is linked on first use, in memory), and the folder's path.

    ``select`` keeps some ranks or traces: the views read only their partitions, every id as a full open
    gives it (``tracekit.store.selection``); a rank or label the dataset lacks is an error.
    """
    source, path = path, Path(path).resolve()
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise TraceFormatError(path, f"not a complete tracekit dataset (no readable {MANIFEST}: {exc})") from None
    if manifest.get("format") != FORMAT:
        raise TraceFormatError(path, f"{MANIFEST} is not a tracekit dataset's")
    if manifest.get("schema_version") != database.SCHEMA_VERSION:
        raise TraceFormatError(
            path,
            f"written with tracekit schema {manifest.get('schema_version')}, this tracekit reads schema "
            f"{database.SCHEMA_VERSION}: rebuild it with 'tracekit load --parquet'",
        )
    con = duckdb.connect()
    # The files' footers read once per connection, not at each bind of a view over them (every query, and
    # every view and macro created below): a dataset's files do not change once written.
    con.execute("SET parquet_metadata_cache = true")
    con.execute("CREATE TABLE tracekit_info (key VARCHAR, value VARCHAR)")
    insert_rows(
        con,
        "tracekit_info",
        [("schema_version", str(database.SCHEMA_VERSION)), ("linked", "false"), ("dataset", str(path))],
    )
    tables = manifest.get("tables") if manifest.get("linked") else None
    entries = manifest["traces"]
    if select:
        rows = trace_rows(path)
        chosen = selection.choose(rows, select, source)
        entries = [entry for entry in entries if entry["trace_id"] in set(chosen)]
        selection.record(con, select, chosen, len(rows))
    _base_views(con, path, entries, tables=tables, uniform=manifest.get("uniform", ()))
    database.create_views(con)
    if tables:
        pipeline.adopt(con, comment=False)
    return con, path
