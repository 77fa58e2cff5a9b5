"""@uses: a query builds on others' rows instead of copying their SQL."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tracekit
from tracekit.errors import QueryError
from tracekit.library import queries

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "cpu_attention" / "naive.json.gz"


def _write(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.sql").write_text(text)


def test_a_query_uses_another_and_inherits_its_parameters(tmp_path):
    _write(
        tmp_path,
        "calls_per_impl",
        "-- Calls per implementation.\n--\n-- Counts attention_calls rows.\n--\n-- @uses attention_calls\n"
        "-- @column trace VARCHAR  Trace.\n-- @column impl VARCHAR  Impl.\n-- @column n BIGINT  Calls.\n"
        "SELECT trace, impl, count(*) AS n FROM attention_calls GROUP BY ALL ORDER BY trace, impl;\n",
    )
    q = queries.find("calls_per_impl", [tmp_path])
    assert set(q.params) == {"include_orphans"}  # from attention_calls
    assert q.sql.startswith('WITH "attention_calls" AS (')
    with tracekit.load(SAMPLE) as trace:
        got = trace.query("calls_per_impl", query_dirs=[tmp_path]).rows()
        direct = trace.query("attention_calls")
        assert got == [("naive", "naive", direct.height)]
        assert direct.height > 0


def test_a_recursive_query_can_use_another(tmp_path):
    # WITH RECURSIVE in the using query: the used query's CTE must go after RECURSIVE, not before it.
    _write(
        tmp_path,
        "counted",
        "-- Counted.\n--\n-- Three rows from a recursive CTE, next to attention_calls.\n--\n-- @uses attention_calls\n"
        "-- @column n BIGINT  N.\n-- @column calls BIGINT  Calls.\n"
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3)\n"
        "SELECT n, (SELECT count(*) FROM attention_calls) AS calls FROM r ORDER BY n;\n",
    )
    q = queries.find("counted", [tmp_path])
    assert q.sql.startswith('WITH RECURSIVE "attention_calls" AS (')
    with tracekit.load(SAMPLE) as trace:
        calls = trace.query("attention_calls").height
        assert calls > 0
        assert trace.query("counted", query_dirs=[tmp_path]).rows() == [(1, calls), (2, calls), (3, calls)]


def test_uses_errors_name_the_file(tmp_path):
    head = "-- T.\n--\n-- D.\n--\n"
    _write(tmp_path, "a", head + "-- @uses b\n-- @column x INTEGER  X.\nSELECT 1 AS x ORDER BY x;\n")
    _write(tmp_path, "b", head + "-- @uses a\n-- @column x INTEGER  X.\nSELECT 1 AS x ORDER BY x;\n")
    # Broken user queries are left out of the library (the rest still work) and named when run.
    assert {"a", "b"} <= set(queries.broken([tmp_path])) and "a" not in queries.library([tmp_path])
    with pytest.raises(QueryError, match=r"a\.sql: @uses forms a cycle|b\.sql: @uses forms a cycle"):
        queries.find("a", [tmp_path])
    (tmp_path / "b.sql").unlink()
    with pytest.raises(QueryError, match=r"a\.sql: @uses b: no such query"):
        queries.find("a", [tmp_path])


def test_a_parameter_declared_but_used_by_nothing_is_still_an_error(tmp_path):
    _write(
        tmp_path,
        "c",
        "-- T.\n--\n-- D.\n--\n-- @uses gpu_timeline\n-- @param nope BOOLEAN = false  Unused.\n"
        "-- @column trace VARCHAR  Trace.\nSELECT trace FROM gpu_timeline ORDER BY trace;\n",
    )
    with pytest.raises(QueryError, match=r"c\.sql:6: parameter 'nope' is declared but not used"):
        queries.find("c", [tmp_path])


def test_an_edited_user_query_is_read_again(tmp_path):
    """The parsed library is kept between lookups, but a file added, edited or removed shows at once."""
    mine = tmp_path / "mine.sql"
    mine.write_text("-- One.\nSELECT 1 AS n\n")
    assert queries.find("mine", [tmp_path]).sql == "SELECT 1 AS n"
    mine.write_text("-- Two.\nSELECT 22 AS n\n")  # a new size
    assert queries.find("mine", [tmp_path]).sql == "SELECT 22 AS n"
    stat = mine.stat()
    mine.write_text("-- Two.\nSELECT 33 AS n\n")  # the same size: told apart by the mtime
    os.utime(mine, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert queries.find("mine", [tmp_path]).sql == "SELECT 33 AS n"
    (tmp_path / "other.sql").write_text("-- Other.\nSELECT 4 AS n\n")
    assert queries.find("other", [tmp_path]).sql == "SELECT 4 AS n"
    mine.unlink()
    with pytest.raises(QueryError, match="no query named 'mine'"):
        queries.find("mine", [tmp_path])
