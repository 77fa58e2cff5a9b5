"""The reader cuts the events array out exactly, whatever surrounds it.

Synthetic files whose contents are known by construction; PART_BYTES is made
tiny so every file is split into many parts that DuckDB reads in parallel.
"""

from __future__ import annotations

import gzip
import json

import pytest

import tracekit
from tracekit.ingest import scan


def events(n, text="x"):
    return [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"{text}{i}",
            "pid": 1,
            "tid": 1,
            "ts": 1000 + i + 0.125,
            "dur": 0.5,
            "args": {"External id": i, "Input Dims": [[i, 2], []]},
        }
        for i in range(n)
    ]


def loaded_names(path):
    with tracekit.load(path) as trace:
        return trace.sql("SELECT name FROM events ORDER BY ordinal")["name"].to_list(), trace.sql(
            "SELECT metadata FROM traces"
        )["metadata"][0]


@pytest.fixture(autouse=True)
def tiny_parts(monkeypatch):
    monkeypatch.setattr(scan, "PART_BYTES", 2048)
    monkeypatch.setattr(scan, "BLOCK_BYTES", 1024)


@pytest.mark.parametrize("gz", [False, True])
def test_keys_before_and_after_the_array_with_arrays_after_it(tmp_path, gz):
    # TraceLens writes deviceProperties (an array of objects) after traceEvents.
    ev = events(300)
    text = (
        '{"metadata": {"a": [1, "]"]}, "traceEvents": '
        + json.dumps(ev, indent=2)
        + ', "deviceProperties": [{"id": 0, "name": "GPU ]}, {"}, {"id": 1}], "traceName": "t]", "n": [[1], [2]]}'
    )
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    names, meta = loaded_names(path)
    assert names == [e["name"] for e in ev]
    assert json.loads(meta) == {
        "metadata": {"a": [1, "]"]},
        "deviceProperties": [{"id": 0, "name": "GPU ]}, {"}, {"id": 1}],
        "traceName": "t]",
        "n": [[1], [2]],
    }


def test_many_parts_keep_order_and_count(tmp_path, monkeypatch):
    staged = []
    real_stage = scan.stage
    monkeypatch.setattr(scan, "stage", lambda *a, **k: staged.append(real_stage(*a, **k)) or staged[-1])
    ev = events(2000)
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    names, _ = loaded_names(path)
    assert names == [e["name"] for e in ev]
    assert len(staged[0].parts) > 10 and not staged[0].exact


def test_a_split_inside_a_string_falls_back_to_the_exact_parse(tmp_path, monkeypatch):
    # Names holding "}, {" fool the byte-level split; DuckDB rejects the parts
    # and the exact parser must produce the same events.
    exact = []
    real_exact = scan.stage_exact
    monkeypatch.setattr(scan, "stage_exact", lambda *a, **k: exact.append(a[0]) or real_exact(*a, **k))
    ev = events(400, text='"}, {"ph": "X", ' * 20)
    path = tmp_path / "tricky.json"
    path.write_text(json.dumps({"traceEvents": ev}))
    names, _ = loaded_names(path)
    assert names == [e["name"] for e in ev]
    assert exact == [path]


def test_bare_array_and_unterminated_array(tmp_path):
    ev = events(50)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(ev))
    assert loaded_names(bare)[0] == [e["name"] for e in ev]
    # Chrome's array format allows the closing bracket (and a trailing comma) to be missing.
    open_ended = tmp_path / "open.json"
    open_ended.write_text(json.dumps(ev)[:-1] + ",\n")
    assert loaded_names(open_ended)[0] == [e["name"] for e in ev]


def test_unicode_and_control_characters_survive(tmp_path):
    ev = events(3)
    ev[1]["name"] = "naïve → attention \u0001 ✓"
    path = tmp_path / "u.json"
    path.write_text(json.dumps({"traceEvents": ev}, ensure_ascii=False), encoding="utf-8")
    assert loaded_names(path)[0][1] == "naïve → attention \u0001 ✓"


def test_nanosecond_fractions_and_epoch_timestamps_are_exact(tmp_path):
    # 1623142623460016.123 us is not representable as a float64.
    text = '{"traceEvents": [{"ph": "X", "name": "k", "ts": 1623142623460016.123, "dur": 0.001}]}'
    path = tmp_path / "t.json"
    path.write_text(text)
    with tracekit.load(path) as trace:
        assert trace.sql("SELECT ts_ns, dur_ns FROM slices").row(0) == (1623142623460016123, 1)


def test_every_category_spelling_maps_to_its_kind(tmp_path):
    """Ground truth is CATEGORY_KINDS itself, written in upper and lower case, plus the phase rules."""
    from tracekit.schema.kinds import CATEGORY_KINDS

    evs = [
        {"ph": "X", "cat": cat.upper() if i % 2 else cat, "name": f"e{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i, cat in enumerate(CATEGORY_KINDS)
    ]
    expected = list(CATEGORY_KINDS.values())
    evs += [
        {"ph": "X", "cat": "brand_new_category", "name": "new", "pid": 1, "tid": 1, "ts": 100, "dur": 1},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}},
        {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 101, "s": "t"},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 102, "args": {"bytes": 5}},
        {"ph": "X", "name": "no_cat", "pid": 1, "tid": 1, "ts": 103, "dur": 1},
    ]
    expected += ["unknown", "metadata", "marker", "counter", "unknown"]
    path = tmp_path / "cats.json"
    path.write_text(json.dumps({"traceEvents": evs}))
    with tracekit.load(path) as trace:
        got = trace.sql("SELECT kind FROM events ORDER BY ordinal")["kind"].to_list()
    assert got == expected


@pytest.mark.parametrize("copy_file_range", [True, False])
def test_a_plain_file_is_staged_into_the_parts_the_streaming_path_writes(tmp_path, monkeypatch, copy_file_range):
    """An uncompressed file's parts are copied file to file (os.copy_file_range, else through
    Python); the gzipped copy of the same text goes through the streaming writer: same bytes."""
    if not copy_file_range:
        monkeypatch.delattr(scan.os, "copy_file_range", raising=False)
    ev = events(400)
    text = '{"x": 1,\n"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in ev) + '\n],\n"after": [1, "]"]}\n'
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    staged = {}
    for path in (plain, packed):
        work = tmp_path / path.name.replace(".", "_")
        work.mkdir()
        st = scan.stage(path, work, "t1")
        staged[path.suffix] = (st.header, st.body_bytes, [p.read_bytes() for p in st.parts])
    assert staged[".json"] == staged[".gz"]
    header, body_bytes, parts = staged[".json"]
    assert header == {"x": 1, "after": [1, "]"]} and len(parts) > 10
    body = text[text.index("[") + 1 : text.index('],\n"after"')]
    assert body_bytes == len(body.encode())
    assert [e for p in parts for e in json.loads(p)] == ev


def test_an_unterminated_array_cut_on_an_event_boundary_keeps_every_event(tmp_path, monkeypatch):
    """Synthetic, known by construction: a plain Chrome array without its closing bracket whose first
    read block ends exactly after an event's ",\\n". The plain path looked at the file's tail, found no
    end and handed over to the streaming path without seeking back, which then read on from the end of
    the file: it staged the first block alone, a valid shorter array (39 of 100 events, no error)."""
    monkeypatch.setattr(scan, "BLOCK_BYTES", 4096)  # 4095 bytes of body = 39 lines of 105 bytes
    lines = []
    for i in range(100):
        event = {"name": "x", "ph": "X", "ts": i, "dur": 1, "pid": 1, "tid": 1, "cat": "cpu_op", "args": {"p": ""}}
        event["args"]["p"] = "a" * (103 - len(json.dumps(event)))
        lines.append(json.dumps(event))
        assert len(lines[-1]) + 2 == 105
    path = tmp_path / "unterminated.json"
    path.write_text("[" + ",\n".join(lines) + ",\n")
    with tracekit.load(path) as trace:
        assert trace.rows("SELECT count(*), min(ts_ns), max(ts_ns) FROM events") == [(100, 0, 99_000)]
