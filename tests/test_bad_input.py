"""Bad input: one line naming the file and the problem, exit 1, no output file.

The inputs are tiny hand-written files whose defect is known by construction.
"""

from __future__ import annotations

import gzip
import json

import pytest

import tracekit
from tracekit.cli import main

GOOD_EVENT = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.5, "dur": 2.25}


def load_error(tmp_path, capsys, *inputs, options=()):
    out = tmp_path / "out.duckdb"
    rc = main(["load", *[str(p) for p in inputs], "-o", str(out), "-q", *options])
    err = capsys.readouterr().err
    assert rc == 1
    assert not out.exists()
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".out.duckdb")] == []
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


def write(path, text, gz=False):
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


CASES = {
    "missing": (None, "no such file"),
    "not_json": ("hello world", "not JSON"),
    "empty": ("", "empty file"),
    "no_events_key": ('{"schemaVersion": 1, "traceName": "x"}', "JSON without events"),
    "empty_events": ('{"traceEvents": []}', "'traceEvents' is empty"),
    "events_not_array": ('{"traceEvents": {"a": 1}}', "'traceEvents' is not an array"),
    "truncated_json": (
        '{"schemaVersion": 1, "traceEvents": [' + json.dumps(GOOD_EVENT) + ', {"ph": "X", "ts',
        "truncated JSON",
    ),
    "broken_event": (
        '{"traceEvents": [' + json.dumps(GOOD_EVENT) + ', {"ph": "X" "ts": 1}]}',
        "invalid JSON at line 1",
    ),
    "missing_ts": (
        '{"traceEvents": [' + json.dumps(GOOD_EVENT) + ', {"ph": "X", "name": "a", "pid": 1, "tid": 1, "dur": 1}]}',
        "event #1 in traceEvents (ph='X' name='a') has no numeric 'ts'",
    ),
    "string_ts": ('{"traceEvents": [{"ph": "i", "name": "m", "ts": "soon"}]}', "has no numeric 'ts'"),
    "negative_dur": ('{"traceEvents": [{"ph": "X", "name": "k", "ts": 5, "dur": -3}]}', "negative dur of -3.000 us"),
    "absurd_ts": ('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1e30, "dur": 1}]}', "no numeric 'ts'"),
    "absurd_dur": ('{"traceEvents": [{"ph": "X", "name": "k", "ts": 1, "dur": 5e12}]}', "absurd dur"),
    "not_object_event": ("[1, 2]", "is not a JSON object"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_gives_one_line_error_and_no_output(case, tmp_path, capsys):
    text, expected = CASES[case]
    path = tmp_path / f"{case}.json"
    if text is not None:
        write(path, text)
    line = load_error(tmp_path, capsys, path)
    assert str(path) in line
    assert expected in line


def test_truncated_gzip(tmp_path, capsys):
    full = gzip.compress(json.dumps({"traceEvents": [GOOD_EVENT] * 200}).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(full[: len(full) // 2])
    line = load_error(tmp_path, capsys, path)
    assert str(path) in line and "truncated gzip" in line


def test_corrupt_gzip(tmp_path, capsys):
    full = bytearray(gzip.compress(json.dumps({"traceEvents": [GOOD_EVENT] * 200}).encode()))
    full[30:60] = b"\xff" * 30
    path = tmp_path / "bad.json.gz"
    path.write_bytes(bytes(full))
    line = load_error(tmp_path, capsys, path)
    assert str(path) in line and "gzip" in line


def test_one_bad_file_among_good_ones_is_reported_and_the_others_load_in_one_process(tmp_path, capsys):
    # --jobs 1 runs the same one-task-per-file load as the workers (tests/test_parallel.py), in this process.
    bad = write(tmp_path / "bad.json", '{"traceEvents": [{"ph": "X", "ts": 1, "dur": -1}]}')
    good = write(tmp_path / "good.json", json.dumps({"traceEvents": [GOOD_EVENT]}))
    out = tmp_path / "out.duckdb"
    assert main(["load", str(bad), str(good), "-o", str(out), "-q", "--jobs", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"Warning: {bad}: event #0 in traceEvents") and "negative dur" in err[0]
    assert err[1:] == [f"Error: 1 of 2 trace files failed to load (bad.json); {out} holds the other 1"]
    with tracekit.open(out) as t:
        assert t.rows("SELECT path FROM traces") == [(str(good),)]


def test_existing_output_is_not_replaced_without_force(tmp_path, capsys):
    good = write(tmp_path / "good.json", json.dumps({"traceEvents": [GOOD_EVENT]}))
    out = tmp_path / "out.duckdb"
    out.write_text("precious")
    assert main(["load", str(good), "-o", str(out), "-q"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert out.read_text() == "precious"
    assert main(["load", str(good), "-o", str(out), "-q", "--force"]) == 0


def test_failed_rebuild_keeps_the_previous_database(tmp_path, capsys):
    good = write(tmp_path / "good.json", json.dumps({"traceEvents": [GOOD_EVENT]}))
    bad = write(tmp_path / "bad.json", "nope")
    out = tmp_path / "out.duckdb"
    assert main(["load", str(good), "-o", str(out), "-q"]) == 0
    before = out.read_bytes()
    assert main(["load", str(bad), "-o", str(out), "-q", "--force"]) == 1
    assert out.read_bytes() == before


def test_unknown_categories_and_extra_keys_are_kept(tmp_path):
    import tracekit

    events = [
        GOOD_EVENT,
        {"ph": "X", "cat": "my_new_cat", "name": "thing", "pid": 1, "tid": 1, "ts": 20, "dur": 1, "weird": [1, 2]},
        {"ph": "Z", "name": "future phase", "ts": 30},
        {"ph": "B", "name": "begin", "pid": 1, "tid": 2, "ts": 40},
    ]
    path = write(tmp_path / "odd.json", json.dumps({"traceEvents": events, "custom_key": {"a": 1}}))
    with tracekit.load(path) as trace:
        assert trace.sql("SELECT count(*) AS n FROM events")["n"][0] == 4
        row = trace.sql("SELECT kind, extra FROM slices WHERE cat = 'my_new_cat'").to_dicts()[0]
        assert row["kind"] == "unknown" and json.loads(row["extra"])["weird"] == [1, 2]
        assert sorted(trace.sql("SELECT ph FROM other_events")["ph"]) == ["B", "Z"]
        assert json.loads(trace.sql("SELECT metadata FROM traces")["metadata"][0])["custom_key"] == {"a": 1}


def test_directory_skips_json_that_is_not_a_trace_with_a_warning(tmp_path, capsys):
    d = tmp_path / "runs"
    d.mkdir()
    write(d / "rank0.json", json.dumps({"traceEvents": [GOOD_EVENT]}))
    write(d / "manifest.json", json.dumps({"files": ["rank0.json"]}))
    out = tmp_path / "out.duckdb"
    assert main(["load", str(d), "-o", str(out), "-q"]) == 0
    assert "skipped 1 JSON file(s) without trace events" in capsys.readouterr().err
    # Named explicitly, the same file is an error.
    out.unlink()
    assert "JSON without events" in load_error(tmp_path, capsys, d / "manifest.json")
