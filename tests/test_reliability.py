"""No traceback on any input; SQL without file access; one broken query file stays one problem.

Inputs are small synthetic traces whose truth is known by construction
(written here, or tests/synthetic.py's "math" variant).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from synthetic import post_variants

import tracekit
from tracekit.cli import main
from tracekit.common import outputs
from tracekit.errors import QueryError
from tracekit.present import render, values


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "math.json.gz"
    post_variants()["math"].write(path)
    return path


def _one_line(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith("Error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("where", ["header", "event", "event_then_bad_json"])
def test_deep_nesting_is_a_one_line_error(where, tmp_path, capsys):
    """5,000 levels of nesting (RecursionError in Python's parser): before the events (fast and exact
    paths parse the header), or in an event of a malformed file (the exact path parses every event)."""
    path = tmp_path / "deep.json"
    deep = _deep(5000)

    def event(x: str) -> str:
        return '{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"x": ' + x + "}}"

    text = {
        "header": '{"deep": ' + deep + ', "traceEvents": [' + event("1") + "]}",
        "event": '{"traceEvents": [' + event(deep) + "]}",
        "event_then_bad_json": '{"traceEvents": [' + event(deep) + ", {]}",
    }[where]
    path.write_text(text)
    out = tmp_path / "x.duckdb"
    code = main(["load", str(path), "-o", str(out)])
    if where == "event":  # valid JSON: DuckDB's reader takes any depth
        assert code == 0
        with tracekit.open(out) as trace:
            assert trace.rows("SELECT count(*) FROM events") == [(1,)]
    else:
        _one_line(capsys, code, str(path), "nested too deeply")
        assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("sql", ["", ";", "  ;; ", "/* nothing */ ;"])
def test_empty_sql_is_a_one_line_error(sql, trace_file, capsys):
    _one_line(capsys, main(["sql", str(trace_file), sql]), "SQL text is empty")


def test_an_unexpected_exception_is_one_line_with_a_hint(monkeypatch, trace_file, capsys):
    from tracekit import api

    def boom(*a, **k):
        raise KeyError("surprise")

    monkeypatch.setattr(api, "load", boom)
    _one_line(capsys, main(["query", "gpu_timeline", str(trace_file)]), "unexpected KeyError", "--debug")
    assert main(["--debug", "query", "gpu_timeline", str(trace_file)]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_memory_limit_is_validated_not_pasted(trace_file, tmp_path, monkeypatch, capsys):
    """A quote in TRACEKIT_MEMORY_LIMIT once ran SQL in the user's database."""
    db = tmp_path / "t.duckdb"
    tracekit.load(trace_file, output=db).close()
    monkeypatch.setenv("TRACEKIT_MEMORY_LIMIT", "1GB'; CREATE TABLE pwned AS SELECT 1; --")
    code = main(["query", "stage_breakdown", str(db)])
    _one_line(capsys, code, "TRACEKIT_MEMORY_LIMIT=", "expected a size")
    monkeypatch.delenv("TRACEKIT_MEMORY_LIMIT")
    with tracekit.open(db) as trace:
        assert not trace.rows("SELECT 1 FROM duckdb_tables() WHERE table_name = 'pwned'")
    _one_line(capsys, main(["load", str(trace_file), "-o", str(tmp_path / "u.duckdb"), "--memory-limit", "lots"]))


def test_memory_limit_is_validated_in_a_parallel_load(trace_file, tmp_path, capsys):
    """With --jobs 2 a bad --memory-limit was each file's load failure (DuckDB's parser error), not one error."""
    second = tmp_path / "math2.json.gz"
    second.write_bytes(trace_file.read_bytes())
    out = tmp_path / "p.duckdb"
    args = ["load", str(trace_file), str(second), "-o", str(out), "--memory-limit", "lots", "--jobs", "2"]
    _one_line(capsys, main(args), "--memory-limit='lots'", "expected a size")
    assert not out.exists()


@pytest.mark.parametrize("jobs", [1, 2])
def test_load_with_output_keeps_allow_files(trace_file, tmp_path, jobs):
    """load(..., output=, jobs=2) merged in worker processes and dropped allow_files=True."""
    second = tmp_path / "math2.json.gz"
    second.write_bytes(trace_file.read_bytes())
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n41\n")
    with tracekit.load([trace_file, second], output=tmp_path / "t.duckdb", jobs=jobs, allow_files=True) as trace:
        assert trace.rows(f"SELECT a + 1 FROM read_csv('{secret}')") == [(42,)]


def test_sql_has_no_file_access_unless_allowed(trace_file, tmp_path, capsys):
    target = tmp_path / "written.csv"
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n41\n")
    code = main(["sql", str(trace_file), f"COPY (SELECT 1 AS a) TO '{target}'"])
    _one_line(capsys, code, "disabled by configuration", "--allow-files")
    assert not target.exists()
    code = main(["sql", str(trace_file), f"SELECT * FROM read_csv('{secret}')"])
    _one_line(capsys, code, "--allow-files")
    # Re-enabling from SQL is refused by DuckDB itself.
    _one_line(capsys, main(["sql", str(trace_file), "SET enable_external_access = true"]))
    assert (
        main(["--allow-files", "sql", str(trace_file), f"SELECT a + 1 AS b FROM read_csv('{secret}')", "-f", "csv"])
        == 0
    )
    assert capsys.readouterr().out == "b\n42\n"
    # Every way of running SQL from Python says the way out (rows() once gave DuckDB's bare message).
    with tracekit.load(trace_file, cache=False, allow_files=False) as trace:
        for run in (trace.rows, trace.sql, trace.arrow):
            with pytest.raises(QueryError, match="--allow-files"):
                run(f"SELECT * FROM read_csv('{secret}')")


def test_a_broken_user_query_is_reported_and_the_rest_still_work(trace_file, tmp_path, capsys):
    folder = tmp_path / "q"
    folder.mkdir()
    (folder / "good.sql").write_text(
        "-- Count events.\n-- @column n BIGINT  Events.\nSELECT count(*) AS n FROM events\n"
    )
    (folder / "bad.sql").write_text("SELECT 1\n")  # no header
    (folder / "uses_bad.sql").write_text("-- Uses bad.\n-- @uses bad\n-- @column n BIGINT  x.\nSELECT 1 AS n\n")
    assert main(["queries", "--queries", str(folder)]) == 0
    out = capsys.readouterr()
    assert "good" in out.out and "core.gpu_timeline" in out.out
    assert out.err.count("Warning: skipped a broken query file") == 2
    assert "bad.sql:1: query has no header" in out.err
    assert main(["query", "good", str(trace_file), "--queries", str(folder), "-f", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "n"
    os.environ["TRACEKIT_QUERY_PATH"] = str(folder)  # stages and report read the same library
    try:
        assert main(["stages", str(trace_file)]) == 0
    finally:
        del os.environ["TRACEKIT_QUERY_PATH"]
    capsys.readouterr()
    _one_line(capsys, main(["query", "bad", str(trace_file), "--queries", str(folder)]), "bad.sql:1")


def _python_trace(path: Path) -> dict:
    """Two top-level frames with the same Python id (1), each with a child (id 2, parent 1)."""
    events = []
    for k, start in enumerate((1000, 5000)):
        events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": f"outer{k}",
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": 1000,
                "args": {"Python id": 1, "Python parent id": None},
            }
        )
        events.append(
            {"ph": "X", "cat": "python_function", "name": f"inner{k}", "pid": 1, "tid": 1, "ts": start + 10,
             "dur": 500, "args": {"Python id": 2, "Python parent id": 1}}
        )  # fmt: skip
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    return {"inner0": "outer0", "inner1": "outer1", "outer0": None, "outer1": None}


def test_python_functions_with_repeated_ids_keep_one_row_each(tmp_path):
    """The parent is the frame of that id whose time contains the child's (rows once multiplied)."""
    path = tmp_path / "py.json.gz"
    truth = _python_trace(path)
    with tracekit.load(path) as trace:
        rows = trace.rows(
            "SELECT f.name, p.name FROM python_functions f LEFT JOIN python_functions p ON p.id = f.parent_id"
        )
    assert dict(rows) == truth
    assert len(rows) == len(truth)


def test_table_output_escapes_terminal_control_characters(trace_file, capsys):
    assert main(["sql", str(trace_file), "SELECT chr(27) || '[2J' || chr(7) || 'x' AS name"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J\\x07x" in out


def test_streamed_output_equals_the_table_rendering(trace_file, tmp_path):
    """Rows rendered from a batch stream (several batches) match the one-table rendering."""
    import io

    sql = "SELECT id, name, ts_ns, args FROM events ORDER BY id"
    with tracekit.load(trace_file) as trace:
        table = trace.arrow(sql)
        assert table.num_rows > 50
        for fmt in ("csv", "json", "ndjson", "table"):
            whole, streamed = io.StringIO(), io.StringIO()
            render.render(table, fmt, out=whole)
            old = render.BATCH_ROWS
            render.BATCH_ROWS = 7
            try:
                render.render(trace.batches(sql), fmt, out=streamed)
            finally:
                render.BATCH_ROWS = old
            if fmt == "table":  # widths come from the first batch: compare the cells
                streamed_lines, whole_lines = streamed.getvalue().splitlines(), whole.getvalue().splitlines()
                del streamed_lines[1], whole_lines[1]  # the dashes under the header
                assert [ln.split() for ln in streamed_lines] == [ln.split() for ln in whole_lines]
            else:
                assert streamed.getvalue() == whole.getvalue(), fmt
        assert json.loads(_json(trace, sql)) == values.records(table)


def _json(trace, sql) -> str:
    import io

    buf = io.StringIO()
    render.render(trace.batches(sql), "json", out=buf)
    return buf.getvalue()


def test_staging_leftovers_of_a_killed_load_are_removed(tmp_path, trace_file):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / (outputs.stage_prefix().replace(f"-{os.getpid()}-", f"-{int(dead.stdout)}-") + "abc")
    stale.mkdir()
    (stale / "t1.0.json").write_text("[]")
    live = tmp_path / (outputs.stage_prefix() + "mine")
    live.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "load", str(trace_file), "-o", str(tmp_path / "x.duckdb"), "-q"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert not stale.exists() and live.exists()


def test_a_fifo_as_input_is_refused_not_read(tmp_path, capsys):
    """Reading a FIFO would block until a writer comes, maybe forever."""
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    _one_line(capsys, main(["load", str(fifo), "-o", str(tmp_path / "x.duckdb")]), str(fifo), "not a regular file")


def _events_text(trace_file: Path) -> dict:
    return json.loads(gzip.decompress(trace_file.read_bytes()))


def test_smaller_inputs_end_in_one_line_naming_the_file(trace_file, tmp_path, capsys):
    doc = _events_text(trace_file)
    # A header value out of range once gave an error without the file name.
    doc["deviceProperties"] = [{"id": 0, "totalGlobalMem": 10**30}]
    hdr = tmp_path / "hdr.json"
    hdr.write_text(json.dumps(doc))
    _one_line(capsys, main(["load", str(hdr), "-o", str(tmp_path / "a.duckdb")]), f"{hdr}: a header value", "range")
    # One invalid UTF-8 byte: the message names the trace, not tracekit's staging copy.
    raw = json.dumps(_events_text(trace_file)).encode()
    for name, at in (("event", raw.index(b'"name": "', raw.index(b'"traceEvents"')) + 9), ("header", 2)):
        bad = tmp_path / f"bad_{name}.json"
        if name == "header":
            bad.write_bytes(b'{"x": "\xff", ' + raw[1:])
        else:
            bad.write_bytes(raw[:at] + b"\xff" + raw[at:])
        err = _one_line(capsys, main(["load", str(bad), "-o", str(tmp_path / "b.duckdb")]), f"{bad}:", "UTF-8")
        assert "tracekit-stage" not in err
    # DuckDB reads a backslash as a folder separator: said so, before any work.
    odd = tmp_path / "back\\slash"
    odd.mkdir()
    _one_line(capsys, main(["load", str(trace_file), "-o", str(odd / "x.duckdb")]), "backslash")
    # The same with several files merged from worker processes (--jobs 2), which did not check it.
    second = tmp_path / "math2.json.gz"
    second.write_bytes(trace_file.read_bytes())
    args = ["load", str(trace_file), str(second), "-o", str(odd / "x.duckdb"), "--jobs", "2"]
    _one_line(capsys, main(args), "backslash")
    assert list(odd.iterdir()) == []


def test_one_empty_rank_does_not_fail_a_directory(trace_file, tmp_path, capsys):
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank0.json").write_text(json.dumps(_events_text(trace_file)))
    (ranks / "rank1.json").write_text('{"traceEvents": []}')
    assert main(["load", str(ranks), "-o", str(tmp_path / "r.duckdb"), "-q"]) == 0
    assert "skipped 1 JSON file(s) without trace events" in capsys.readouterr().err
    with tracekit.open(tmp_path / "r.duckdb") as trace:
        assert trace.rows("SELECT count(*) FROM traces") == [(1,)]
    # Named on its own, an empty trace is still an error.
    _one_line(capsys, main(["load", str(ranks / "rank1.json"), "-o", str(tmp_path / "e.duckdb")]), "is empty")


def test_rules_csv_with_a_byte_order_mark(trace_file, tmp_path, capsys):
    """Excel's "CSV UTF-8" starts with a BOM; the rules read the same with or without it. The rule matches:
    the math variant's region label ``sdpa_fwd`` made a softmax call, so every linked GPU op of the trace (60,
    by construction) is softmax by label, where without the rule the ops decide (qk_matmul, mask, ...)."""
    linked_gpu_ops = sum(1 for g in post_variants(["math"])["math"].truth["gpu_ops"] if not g["orphan"])
    assert linked_gpu_ops == 60

    def breakdown(*rules_args) -> list[tuple]:
        assert main(["stages", str(trace_file), *rules_args, "-f", "json"]) == 0
        rows = json.loads(capsys.readouterr().out)["stage_breakdown"]
        return sorted((r["stage"], r["gpu_ops"], r["gpu_by_label"]) for r in rows)

    without = breakdown()
    assert {stage for stage, _, _ in without} >= {"qk_matmul", "softmax", "pv_matmul", "mask"}
    assert all(by_label == 0 for _, _, by_label in without)
    rule = b"pattern,stage,call,impl,note\n^sdpa_fwd$,softmax,yes,,bom test\n"
    got = {}
    for name, bom in (("plain", b""), ("bom", b"\xef\xbb\xbf")):
        rules = tmp_path / name
        rules.mkdir()
        (rules / "label_stages.csv").write_bytes(bom + rule)
        got[name] = breakdown("--rules", str(rules))
    assert got["bom"] == got["plain"] == [("other", 0, 0), ("softmax", linked_gpu_ops, linked_gpu_ops)]


def test_the_cache_notices_a_rewrite_with_the_same_size_and_mtime(trace_file, tmp_path, monkeypatch):
    from tracekit.ingest.sources import discover
    from tracekit.store import database

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    before = database.cache_key(discover([trace_file]))
    st = trace_file.stat()
    data = trace_file.read_bytes()
    trace_file.unlink()
    trace_file.write_bytes(data)  # same bytes, same size; a new inode and ctime
    os.utime(trace_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert trace_file.stat().st_size == st.st_size and trace_file.stat().st_mtime_ns == st.st_mtime_ns
    assert database.cache_key(discover([trace_file])) != before
