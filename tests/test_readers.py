"""The reader seam: a format is one entry in formats.READERS (synthetic NDJSON, known by construction)."""

from __future__ import annotations

import json
from pathlib import Path

import tracekit
from tracekit.ingest import formats, scan


def _ndjson_reader() -> formats.Reader:
    """A test-only format: one Chrome trace event per line (``*.events.ndjson``)."""

    def stage(path: Path, workdir: Path, stem: str) -> formats.StagedTrace:
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        part = workdir / f"{stem}.0.json"
        part.write_text(json.dumps(events))
        return formats.StagedTrace(path, "array", {}, [part], part.stat().st_size)

    return formats.Reader("ndjson-test", (".events.ndjson",), stage, stage, scan.select_sql)


def test_a_registered_reader_is_found_by_suffix_and_loads_every_event(tmp_path, monkeypatch):
    ndjson = _ndjson_reader()
    monkeypatch.setattr(formats, "READERS", (ndjson, *formats.READERS))
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.5, "dur": 4.0},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 12.25,
            "dur": 1.5,
            "args": {"correlation": 3},
        },
        {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "pid": 1, "tid": 1, "ts": 20.0, "s": "t"},
    ]
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "rank0.events.ndjson").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    (folder / "notes.txt").write_text("not a trace")
    assert formats.is_trace_name("rank0.events.ndjson") and not formats.is_trace_name("notes.txt")
    assert formats.for_path(Path("x.events.ndjson")) is ndjson
    assert formats.for_path(Path("x.json.gz")) is formats.JSON
    with tracekit.load(folder) as trace:
        rows = trace.rows("SELECT name, kind, ts_ns, dur_ns, correlation FROM events ORDER BY ordinal")
        assert rows == [
            ("aten::mm", "cpu_op", 10_500, 4_000, None),
            ("gemm", "kernel", 12_250, 1_500, 3),
            ("mark", "cpu_instant", 20_000, None, None),
        ]
        assert trace.rows("SELECT trace, rank FROM traces") == [("rank0.events.ndjson", 0)]
