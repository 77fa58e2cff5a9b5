"""Linking on first use: `tracekit load` writes the events; the linked model is
built by the first query that reads it, once, into the database file.

The trace is synthetic (tests/synthetic.py, the post's "math" variant): its
GPU ops, launches and op stacks are known by construction.
"""

from __future__ import annotations

import duckdb
import pytest
from synthetic import post_variants

import tracekit
from tracekit import api
from tracekit.cli import main
from tracekit.library import queries
from tracekit.store import database, parallel, pipeline


@pytest.fixture
def trace_file(tmp_path):
    variant = post_variants()["math"]
    path = tmp_path / "math.json.gz"
    variant.write(path)
    return path, variant.truth


def _state(db) -> tuple[str, bool]:
    """(tracekit_info.linked, whether cpu_slices is stored in the file), read independently."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        linked = con.execute("SELECT value FROM tracekit_info WHERE key = 'linked'").fetchall()[0][0]
        stored = bool(con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'cpu_slices'").fetchall())
    finally:
        con.close()
    return linked, stored


def test_load_defers_linking_until_a_query_reads_a_linked_table(trace_file, tmp_path, capsys):
    path, truth = trace_file
    db = tmp_path / "t.duckdb"
    assert main(["load", str(path), "-o", str(db)]) == 0
    assert "linked on first use" in capsys.readouterr().err
    assert _state(db) == ("false", False)

    # The base queries answer from events alone: still not linked afterwards.
    for name in ("gpu_timeline", "top_kernels", "event_counts"):
        assert main(["query", name, str(db), "-f", "json"]) == 0
    capsys.readouterr()
    assert _state(db) == ("false", False)

    # The first query on a linked table links, and writes the result into the file.
    assert main(["sql", str(db), "SELECT count(*) AS n FROM gpu_ops WHERE NOT orphan", "-f", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == str(len(truth["gpu_ops"]) - truth["orphans"])
    assert _state(db) == ("true", True)


def test_load_link_flag_links_at_once(trace_file, tmp_path):
    path, _ = trace_file
    db = tmp_path / "t.duckdb"
    assert main(["load", str(path), "-o", str(db), "--link", "-q"]) == 0
    assert _state(db) == ("true", True)


def test_unwritable_database_links_for_the_session_only(trace_file, tmp_path, monkeypatch):
    """A file this process may not replace: link as TEMP tables, under the same memory cap."""
    path, truth = trace_file
    db = tmp_path / "t.duckdb"
    tracekit.load(path, output=db).close()
    # Root may write anything, so the permission check itself is what says no here.
    monkeypatch.setattr(database, "writable", lambda p: False)
    monkeypatch.setenv("TRACEKIT_MEMORY_LIMIT", "300MB")
    with tracekit.open(db) as trace:
        n = trace.sql("SELECT count(*) AS n FROM gpu_ops")["n"][0]
        assert n == len(truth["gpu_ops"])
        assert trace.linked
        assert trace.rows("SELECT current_setting('memory_limit')") == [("286.1 MiB",)]
        assert trace.query("stage_breakdown").height > 0
    assert _state(db) == ("false", False)


def test_link_while_this_process_holds_the_old_file(trace_file, tmp_path):
    """Another connection of this process keeps the file as it was; the linking one still gets its tables."""
    path, truth = trace_file
    db = tmp_path / "t.duckdb"
    tracekit.load(path, output=db).close()
    holder = tracekit.open(db)
    try:
        with tracekit.open(db) as trace:
            assert trace.sql("SELECT count(*) AS n FROM gpu_ops")["n"][0] == len(truth["gpu_ops"])
            assert trace.query("stage_breakdown").height > 0
        assert holder.rows("SELECT value FROM tracekit_info WHERE key = 'linked'") == [("false",)]
    finally:
        holder.close()
    assert _state(db) == ("true", True)  # written for the next process


def test_other_link_errors_surface(trace_file, tmp_path, monkeypatch):
    """Only a permission problem falls back to a session link; anything else is reported."""
    path, _ = trace_file
    db = tmp_path / "t.duckdb"
    tracekit.load(path, output=db).close()

    def broken(con, *a, **k):
        raise duckdb.IOException("IO Error: simulated failure while linking")

    monkeypatch.setattr(pipeline, "build", broken)
    with tracekit.open(db) as trace, pytest.raises(duckdb.IOException, match="simulated"):
        trace.link()
    assert _state(db) == ("false", False)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp copy left


def test_in_memory_trace_links_on_first_use(trace_file):
    path, truth = trace_file
    trace = tracekit.load(path)
    assert not trace.linked
    assert trace.query("gpu_timeline", include_orphans=True)["busy_ns"][0] == truth["busy_ns"]
    assert not trace.linked
    assert trace.con.execute("SELECT count(*) FROM cpu_stages").fetchall()[0][0] > 0  # con links
    assert trace.linked
    trace.close()


def test_only_the_base_queries_skip_linking():
    """Which shipped queries need the link step, by DuckDB's own parse of their SQL."""
    con = duckdb.connect()
    base = {q.id for q in queries.library().values() if not api.needs_link(con, q.sql)}
    # The cross-rank collective queries read collective_kernels, a base view over events.
    assert base == {
        "core.event_counts",
        "core.gpu_timeline",
        "core.top_kernels",
        "breakdown.gpu_breakdown",
        "breakdown.comm_overlap",
        "breakdown.memory_timeline",
        "findings.dominant_kernel",
        "cluster.matched_collectives",
        "cluster.stragglers",
        "cluster.rank_notes",
    }


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT count(*) AS gpu_ops FROM events", False),  # a column alias, not the table
        ("SELECT * FROM main.GPU_OPS", True),
        ("SELECT * FROM query_table('cpu_stages')", True),
        ("WITH x AS (SELECT * FROM attention_calls) SELECT 1", True),
        ("CREATE TABLE mine AS SELECT * FROM runtime_calls", True),  # not a SELECT: by text
        ("SELECT * FROM gpu_op_events", False),
    ],
)
def test_needs_link(sql, expected):
    assert api.needs_link(duckdb.connect(), sql) is expected


def test_linked_names_are_the_documented_linked_tables():
    from tracekit.schema.catalog import TABLES

    documented = {t.name for t in TABLES.values() if t.group in ("linked", "attention", "rules")}
    assert documented == set(api.LINKED_NAMES)
    assert set(database.VIEWS) | set(pipeline.VIEWS) >= {"gpu_op_events", "cpu_ops"}


def test_a_database_being_written_elsewhere_gets_a_clear_error(trace_file, tmp_path):
    """Another process holds the file for writing (as a first-use link does): one line that says so."""
    import subprocess
    import sys

    path, _ = trace_file
    db = tmp_path / "t.duckdb"
    tracekit.load(path, output=db).close()
    writer = duckdb.connect(str(db))  # this process holds the write lock
    try:
        out = subprocess.run(
            [sys.executable, "-m", "tracekit", "query", "gpu_timeline", str(db)], capture_output=True, text=True
        )
    finally:
        writer.close()
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1
    assert f"{db}: in use by another process that writes it" in out.stderr


def test_a_linked_command_on_a_raw_trace_loads_and_links_in_one_pass(trace_file, tmp_path, monkeypatch, capsys):
    """`stages` on a raw trace builds the cache linked (one build, one write); a base query does not link."""
    path, truth = trace_file
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    links = []
    monkeypatch.setattr(database, "link_file", lambda p: links.append(p))  # a second, separate link pass
    assert main(["query", "gpu_timeline", str(path), "-f", "json"]) == 0
    (db,) = (tmp_path / "cache").glob("*.duckdb")
    assert _state(db) == ("false", False)
    db.unlink()
    assert main(["stages", str(path), "-f", "json"]) == 0
    assert f'"attention_calls_total": {len(truth["steps"])}' in capsys.readouterr().out  # one call per step
    (db,) = (tmp_path / "cache").glob("*.duckdb")
    assert _state(db) == ("true", True)
    assert links == []


@pytest.mark.parametrize("one_transaction_bytes", [0, 1 << 40])
def test_a_linked_build_is_the_same_whichever_way_it_commits(trace_file, tmp_path, monkeypatch, one_transaction_bytes):
    """A small input's model is built in the load's one transaction, a large one's statement by
    statement (its working tables freed as they are dropped): the same tables, rows and comments."""
    path, truth = trace_file
    db = tmp_path / "linked.duckdb"
    monkeypatch.setattr(database, "ONE_TRANSACTION_BYTES", one_transaction_bytes)
    with tracekit.load(path, output=db, link=True) as trace:
        calls = trace.rows("SELECT count(*) FROM attention_calls")[0][0]
        slices = trace.rows("SELECT count(*) FROM cpu_slices")[0][0]
    assert _state(db) == ("true", True)
    assert calls == len(truth["steps"])  # one attention call per step, by construction
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM cpu_slices").fetchall()[0][0] == slices > 0
        assert con.execute("SELECT comment FROM duckdb_tables() WHERE table_name = 'gpu_ops'").fetchall()[0][0]
        assert not con.execute("SELECT 1 FROM duckdb_tables() WHERE temporary").fetchall()  # no working table left
    finally:
        con.close()
    assert not db.with_name(db.name + ".wal").exists()  # checkpointed: nothing left in a log


@pytest.mark.parametrize("way", ["build", "link later", "parallel"])
def test_a_database_is_written_one_row_group_at_a_time(trace_file, tmp_path, monkeypatch, way):
    """A connection that writes a database (a linked build, linking a loaded file later, a parallel load's part
    and merge) flushes each row group of a bulk write as it fills, rather than holding several per thread in
    memory: seen from inside the parse, the merge and the model's build. Its checkpoint does not vacuum (merge
    the part-filled row groups a parallel write leaves, on one core), but where many files' parts are merged."""
    path, truth = trace_file
    seen = []
    build, ingest_ = pipeline.build, database.events_table.ingest

    def setting(where):
        def record(con):
            row_groups, vacuum = con.sql(
                "SELECT current_setting('write_buffer_row_group_count'), current_setting('max_vacuum_tasks')"
            ).fetchall()[0]
            seen.append((where, row_groups, vacuum))

        return record

    monkeypatch.setattr(pipeline, "build", lambda con, *a, **k: setting("build")(con) or build(con, *a, **k))
    monkeypatch.setattr(
        database.events_table, "ingest", lambda con, *a, **k: setting("parse")(con) or ingest_(con, *a, **k)
    )
    merge = parallel.merge
    monkeypatch.setattr(parallel, "merge", lambda con, *a, **k: setting("merge")(con) or merge(con, *a, **k))
    db = tmp_path / "t.duckdb"
    if way == "build":
        database.build_file([path], db, linked=True)
        assert seen == [("parse", 1, 0), ("build", 1, 0)]
    elif way == "parallel":  # one job: the part is loaded here, then merged and linked once, by the merge's connection
        parallel.build_file([path], db, jobs=1, linked=True)
        assert seen == [("parse", 1, 0), ("merge", 1, 100), ("build", 1, 100)]
    else:
        tracekit.load(path, output=db).close()
        seen.clear()
        assert database.link_file(db)
        assert seen == [("build", 1, 0)]
    with tracekit.open(db) as trace:
        assert trace.linked and trace.sql("SELECT count(*) AS n FROM gpu_ops")["n"][0] >= len(truth["gpu_ops"])
