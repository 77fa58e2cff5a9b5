"""load --jobs: one task per file in worker processes, merged into the rows of a one-process load."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from synthetic import post_variants

import tracekit
from tracekit.cli import main
from tracekit.common import outputs
from tracekit.store import database, parallel

# Every column of the base tables but the one that says which process loaded the file.
TABLES = {
    "traces": "SELECT * EXCLUDE (loaded_on) FROM traces ORDER BY trace_id",
    "devices": "SELECT * FROM devices ORDER BY ALL",
    "events": "SELECT * FROM events ORDER BY id",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Six synthetic ranks (the post's attention variants), in one folder of rank files."""
    out = tmp_path_factory.mktemp("ranks")
    for i, (name, variant) in enumerate(post_variants().items()):
        (out / f"rank{i}").mkdir()
        variant.write(out / f"rank{i}" / f"{name}.json.gz")
    return out


def _rows(path: Path) -> dict[str, list]:
    with tracekit.open(path) as t:
        return {name: t.rows(sql) for name, sql in TABLES.items()}


def test_jobs_load_the_same_rows_as_one_process(folder, tmp_path):
    # The reference: every file ingested by one build into one database (tracekit.load(folder, output=...)
    # runs one task per file too, in this process, since --jobs 1 reports a bad file and loads the rest).
    database.build_file([folder], tmp_path / "one.duckdb")
    many = tracekit.load(folder, output=tmp_path / "many.duckdb", jobs=2)
    loaded_on = many.rows("SELECT DISTINCT loaded_on FROM traces")
    many.close()
    a, b = _rows(tmp_path / "one.duckdb"), _rows(tmp_path / "many.duckdb")
    assert len(a["traces"]) == 6 and len(a["events"]) > 900
    for name in TABLES:
        assert a[name] == b[name], name
    # Two worker processes, neither of them this one.
    assert len(loaded_on) == 2
    assert all(not r[0].endswith(f":{__import__('os').getpid()}") for r in loaded_on)
    # Queries that need the linked model agree too.
    with tracekit.open(tmp_path / "one.duckdb") as x, tracekit.open(tmp_path / "many.duckdb") as y:
        assert x.query("stage_breakdown").to_dicts() == y.query("stage_breakdown").to_dicts()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_bad_rank_is_reported_and_the_others_load(folder, tmp_path, capsys, jobs):
    """--jobs 1 too: the same one-task-per-file load, run in this process, does not stop at the bad file."""
    bad = tmp_path / "job"
    for src in sorted(folder.rglob("*.json.gz"))[:3]:
        dest = bad / src.parent.name / src.name
        dest.parent.mkdir(parents=True)
        dest.write_bytes(src.read_bytes())
    # The bad file sorts first (a load that stopped at it would write nothing).
    (bad / "early").mkdir()
    (bad / "early" / "broken.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1, "dur": -5, "name": "x"}]}')
    out = tmp_path / "run.duckdb"
    assert main(["load", str(bad), "-o", str(out), "--jobs", jobs]) == 1
    err = capsys.readouterr().err
    assert "broken.json: event #0 in traceEvents" in err and "negative dur" in err
    assert f"Error: 1 of 4 trace files failed to load (broken.json); {out} holds the other 3" in err
    assert f"{out}: 3 trace(s)," in err  # the summary of what loaded
    with tracekit.open(out) as t:
        assert t.rows("SELECT count(*) FROM traces") == [(3,)]
        loaded_on = t.rows("SELECT DISTINCT loaded_on FROM traces")
    if jobs == "1":  # parsed here, not in a worker process
        assert loaded_on == [(f"{__import__('socket').gethostname()}:{__import__('os').getpid()}",)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job", "run.duckdb"]


def test_the_parts_of_a_killed_load_go_with_the_next_load(folder, tmp_path):
    """A load --jobs killed before its merge leaves its part files (.NAME.tk-HOST-PID-....parts) beside OUTPUT:
    the next load into that folder removes them, as it removes the temporary files of killed writes."""
    import subprocess

    child = subprocess.Popen(["true"])  # a process that has exited: its pid is free
    child.wait()
    pid = child.pid
    host = outputs._HOST
    killed = tmp_path / f".run.duckdb.tk-{host}-{pid}-0123abcd.tmp.parts"
    killed.mkdir()
    (killed / "000000.duckdb").write_bytes(b"part")
    alive = tmp_path / f".other.duckdb.tk-{host}-{os.getpid()}-0123abcd.tmp.parts"  # a load still running
    alive.mkdir()
    out = tmp_path / "run.duckdb"
    assert main(["load", str(folder), "-o", str(out), "--jobs", "2", "-q"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [alive.name, "run.duckdb"]


def test_nothing_is_written_when_no_file_loads(tmp_path, capsys):
    for i in range(2):
        (tmp_path / f"rank{i}.json").write_text("{not json")
    out = tmp_path / "run.duckdb"
    assert main(["load", str(tmp_path), "-o", str(out), "--jobs", "2"]) == 1
    assert "Error: none of the 2 trace files loaded" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json", "rank1.json"]


def test_default_jobs_is_the_cores():
    import os

    assert parallel.default_jobs() == len(os.sched_getaffinity(0))
