"""The one-parse typed read is kept only when its count proves it dropped nothing.

Synthetic traces whose truth is known by construction: the events written
are the events expected, and an event with a key the reader does not type
must come back whole in ``extra``. Each trace is also loaded with the typed
read switched off (the exact read alone): both loads must give the same rows.
"""

from __future__ import annotations

import gzip
import json

import pytest

import tracekit
from tracekit.common import sqlmodules
from tracekit.errors import TraceFormatError
from tracekit.ingest import events_table, scan


def clean_events() -> list[dict]:
    """Events with only the keys the typed read types, ``:`` inside names, args and nested args."""
    return [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python: main"}},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": "thread 2",
            "ts": 1623142616.125,
            "dur": 3.5,
            "args": {"External id": 7, "Input Dims": [[2, 2], []], "note": {"a:b": "c::d"}},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "void at::native::gemm<float>(int)",
            "pid": 0,
            "tid": 7,
            "ts": 1623142620,
            "dur": 0.001,
            "args": {"correlation": 3, "grid": [1, 1, 1]},
        },
        {"ph": "s", "cat": "ac2g", "id": 3, "bp": "e", "pid": 1, "tid": 2, "ts": 1623142617, "name": "ac2g"},
        {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "pid": 1, "tid": 2, "ts": 1623142630, "s": "t"},
        {"ph": "C", "name": "mem", "pid": 1, "ts": 1623142640, "args": {"bytes": 5}},
    ]


@pytest.fixture
def reads(monkeypatch):
    """The SELECTs each load ran, in order: 'typed' and/or 'exact'."""
    ran: list[str] = []
    typed, exact = scan.typed_sql, scan.select_sql
    monkeypatch.setattr(scan, "typed_sql", lambda staged: ran.append("typed") or typed(staged))
    monkeypatch.setattr(scan, "select_sql", lambda parts: ran.append("exact") or exact(parts))
    return ran


def rows(path, exact_only=False):
    """Every column of events in id order; ``exact_only``: the typed read is not tried."""
    real = events_table._insert_typed
    if exact_only:
        events_table._insert_typed = lambda con, batch: False
    try:
        with tracekit.load(path) as trace:
            return trace.sql("SELECT * FROM events ORDER BY id").to_dicts()
    finally:
        events_table._insert_typed = real


def write(path, events, raw_events=None):
    """A Kineto-style trace of ``events`` (or of the JSON texts ``raw_events``), gzipped for .gz."""
    body = ",\n".join(raw_events if raw_events is not None else [json.dumps(e) for e in events])
    text = '{"schemaVersion": 1, "traceEvents": [\n' + body + '\n], "traceName": "t"}'
    path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())
    return path


@pytest.mark.parametrize("name", ["clean.json", "clean.json.gz"])
def test_a_trace_of_known_keys_is_read_once_and_equals_the_exact_read(tmp_path, reads, name):
    path = write(tmp_path / name, clean_events())
    typed = rows(path)
    assert reads == ["typed"]
    reads.clear()
    assert rows(path, exact_only=True) == typed and reads == ["exact"]
    assert [r["name"] for r in typed] == [e.get("name") for e in clean_events()]
    assert all(r["extra"] is None for r in typed)
    assert typed[1]["ts_ns"] == 1623142616125 and typed[2]["dur_ns"] == 1


def unknown_key(events):
    events[1]["tts"] = 12  # Chrome's thread timestamp: not a key the reader types
    events[4]["my:key"] = {"nested": [1, 2]}
    return events, [1, 4]


def escaped_colon_hides_a_key(events):
    # One unknown key (one ':' byte more) and one ':' written as an escape (one byte fewer): a
    # byte count alone would balance; the escape makes the count refuse to prove anything.
    events[2]["flow_in"] = True
    return events, [2]


def null_known_key(events):
    events[3]["bp"] = None
    return events, []


def colon_in_another_value(events):
    events[4]["cat"] = "cpu:instant"
    return events, []


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
@pytest.mark.parametrize(
    "variant",
    [unknown_key, escaped_colon_hides_a_key, null_known_key, colon_in_another_value],
    ids=lambda f: f.__name__,
)
def test_a_trace_the_count_cannot_prove_is_read_exactly_and_keeps_every_key(tmp_path, reads, name, variant):
    events, with_extra = variant(clean_events())
    raw = [json.dumps(e) for e in events]
    if variant is escaped_colon_hides_a_key:
        raw[1] = raw[1].replace("aten::mm", "aten\\u003a:mm")
        events[1]["name"] = "aten::mm"
    path = write(tmp_path / name, events, raw)
    got = rows(path)
    assert [r["name"] for r in got] == [e.get("name") for e in events]
    assert [i for i, r in enumerate(got) if r["extra"] is not None] == with_extra
    for i in with_extra:
        assert json.loads(got[i]["extra"]) == events[i]
    tried = [] if variant is escaped_colon_hides_a_key else ["typed"]
    assert reads == [*tried, "exact"]
    reads.clear()
    assert got == rows(path, exact_only=True)


def test_a_duplicate_key_fails_the_typed_read_and_the_exact_read_loads_it(tmp_path, reads):
    raw = [json.dumps(e) for e in clean_events()]
    raw[2] = raw[2].replace('"ph": "X"', '"ph": "X", "ph": "X"', 1)
    path = write(tmp_path / "dup.json", None, raw)
    got = rows(path)
    assert reads == ["typed", "exact"]
    assert got == rows(path, exact_only=True) and len(got) == len(raw)


def test_an_element_that_is_not_an_object_gets_the_exact_reads_error(tmp_path, reads):
    raw = [json.dumps(e) for e in clean_events()] + ["[1, 2]"]
    path = write(tmp_path / "arr.json", None, raw)
    with pytest.raises(TraceFormatError, match=r"event #6 in traceEvents .* is not a JSON object \(it is array\)"):
        rows(path)
    assert reads == ["typed", "exact"]


def test_one_unprovable_trace_sends_its_whole_batch_to_the_exact_read(tmp_path, reads):
    folder = tmp_path / "run"
    folder.mkdir()
    write(folder / "rank0.json", clean_events())
    events, _ = unknown_key(clean_events())
    write(folder / "rank1.json", events)
    with tracekit.load(folder) as trace:
        got = trace.sql("SELECT trace_id, ordinal, extra FROM events ORDER BY id").rows()
    assert reads == ["typed", "exact"]
    assert [(t, o) for t, o, _ in got] == [(t, o) for t in (1, 2) for o in range(len(events))]
    assert [json.loads(x) for _, _, x in got if x is not None] == [events[1], events[4]]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b'[{"a": "b:c"}, {"d": 1}]', 3),
        (b'[{"a": "\\\\ \\" :"}]', 2),  # backslashes, but no escaped ':'
        (b'[{"a": "\\u003a"}]', None),
        (b'[{"a": "\\u003A"}]', None),
    ],
)
def test_count_colons_counts_bytes_and_refuses_escapes(tmp_path, text, expected):
    path = tmp_path / "part.json"
    path.write_bytes(text)
    assert scan.count_colons(path) == expected


def test_count_colons_sees_an_escape_across_a_block_boundary(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "BLOCK_BYTES", 16)
    for cut in range(1, 6):  # the escape split after each of its characters
        text = b"x" * (16 - cut) + b"\\u003a" + b":" * 20
        path = tmp_path / f"p{cut}.json"
        path.write_bytes(text)
        assert scan.count_colons(path) is None
        path.write_bytes(text.replace(b"\\u003a", b"\\u0041"))
        assert scan.count_colons(path) == 20


@pytest.mark.parametrize("copy_file_range", [True, False])
def test_staging_counts_the_colons_of_the_events_array_only(tmp_path, monkeypatch, copy_file_range):
    """Plain files are copied and counted part by part on two threads, gzipped ones as the streaming
    writer writes them; the keys around the array (full of ':') are not counted."""
    if not copy_file_range:
        monkeypatch.delattr(scan.os, "copy_file_range", raising=False)
    monkeypatch.setattr(scan, "PART_BYTES", 2048)
    monkeypatch.setattr(scan, "BLOCK_BYTES", 1024)
    body = ",\n".join(json.dumps(e) for e in clean_events() * 40)
    text = '{"a": {"b:c": 1}, "traceEvents": [' + body + '], "z": [{"y": ":"}]}'
    for name in ("t.json", "t.json.gz"):
        path = tmp_path / name
        path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
        work = tmp_path / name.replace(".", "_")
        work.mkdir()
        staged = scan.stage(path, work, "t1")
        assert len(staged.parts) > 10
        assert staged.colons == body.count(":") == sum(p.read_bytes().count(b":") for p in staged.parts)


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_staging_gives_up_counting_at_an_escape_and_counts_an_unterminated_array(tmp_path, monkeypatch, name):
    """Both staging paths: a \\u003a escape (a ':' without its byte) anywhere in the array leaves the
    count to nobody (None: the exact read), split across a block boundary too; an array whose closing
    bracket is missing (allowed in Chrome's array form) counts every event's ':'."""
    monkeypatch.setattr(scan, "BLOCK_BYTES", 64)
    events = [json.dumps(e) for e in clean_events() * 8]
    escaped = events[:5] + ['{"name": "a\\u003ab", "ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 1}'] + events[5:]
    for i, (text, expected) in enumerate(
        [
            ('{"traceEvents": [' + ",".join(escaped) + "]}", None),
            ("[" + ",\n".join(events) + ",\n", sum(e.count(":") for e in events)),
        ]
    ):
        path = tmp_path / f"{i}{name}"
        path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
        work = tmp_path / f"w{i}{name}"
        work.mkdir()
        assert scan.stage(path, work, "t1").colons == expected


# ts/dur in microseconds as written, and their nanoseconds by exact decimal arithmetic.
TIMES = [
    "0",
    "-12.5",
    "0.001",
    "-0.001",
    "1712195500001778.039",  # epoch microseconds: the center staging's sample finds
    "1712195500001778",
    "1711200000000000.001",  # the edges of the center's window (10^12 us each side)
    "1711200000000000",
    "1713199999999999.999",
    "1713200000000000.001",
    "999999999999.999",
    "1000000000000.000",
    "-999999999999.999",
    "8999999999999999.999",  # events_table.MAX_ABS_TS_US: far from every center
    "-8999999999999999.999",
    "5e3",
    "12.5E-2",
]
DURS = [
    "0",
    "0.001",
    "12.5",
    "999999999999.999",
    "1000000000000.000",
    "5e3",
    "12.5E-2",
]  # up to events_table.MAX_DUR_US


def ns(text):
    from decimal import Decimal

    value = Decimal(text) * 1000
    assert value == int(value)
    return int(value) if -(2**63) <= value < 2**63 else None


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_ts_and_dur_are_exact_nanoseconds_whichever_path_converts_them(tmp_path, reads, name):
    """The short int64 conversion (``ingest/read/nanoseconds``) near the sampled center and 0, the 128-bit one
    elsewhere: every value as exact decimal arithmetic says, out-of-range ones NULL (a metadata
    event may hold one)."""
    raw = ['{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1712195500001778.5, "dur": 1}'] * 20
    raw += [f'{{"ph": "X", "name": "t", "pid": 1, "tid": 1, "ts": {t}, "dur": 0}}' for t in TIMES]
    raw += [f'{{"ph": "X", "name": "d", "pid": 1, "tid": 1, "ts": 5, "dur": {d}}}' for d in DURS]
    # Out of int64 nanoseconds: NULL, kept for a metadata event (others must have a ts).
    raw += [f'{{"ph": "M", "name": "m", "pid": 1, "ts": {t}}}' for t in ("9223372036854775.808", "-1" + "0" * 19)]
    raw += ['{"ph": "M", "name": "m", "pid": 1}']
    path = write(tmp_path / name, None, raw)
    got = rows(path)
    assert reads == ["typed"]
    assert [r["ts_ns"] for r in got if r["name"] == "t"] == [ns(t) for t in TIMES]
    assert [r["dur_ns"] for r in got if r["name"] == "d"] == [ns(d) for d in DURS]
    assert [r["ts_ns"] for r in got if r["name"] == "m"] == [None, None, None]
    reads.clear()
    assert rows(path, exact_only=True) == got


def test_the_sampled_centers_put_an_epoch_trace_on_the_short_path(tmp_path):
    part = tmp_path / "t1.0000.json"
    part.write_text('[{"ph": "M", "ts": 0}, ' + ", ".join(['{"ts": 1712195500001778.039}'] * 5) + "]")
    assert scan.ts_centers([part]) == [1712200000000000]
    con = __import__("duckdb").connect()
    sql = sqlmodules.text("ingest/read/nanoseconds", us="x", c1=1712200000000000, c2=None, c3=None)
    got = con.execute(f"SELECT {sql} FROM (SELECT 1713199999999999.999::DECIMAL(24,3) AS x)").fetchall()
    assert got == [(1713199999999999999,)]


def test_the_typed_read_accounts_for_every_key_it_types():
    """``ingest/read/typed_rows`` counts one ``:`` per held key in a term per key, written out; the keys it
    types are bound from ``scan.EVENT_SPEC``. The two lists are one: a key typed and not counted would send
    every trace to the exact read, one counted and not typed would fail the typed read."""
    import re

    (query,) = sqlmodules.module("ingest/read/typed_rows").statements
    assert re.findall(r'\(e\."(\w+)" IS NOT NULL\)::BIGINT', query) == list(scan.EVENT_SPEC)


def test_at_most_three_centers_most_frequent_first_and_a_missing_one_is_no_term(tmp_path):
    """``ts_centers`` gives the three most frequent; the read binds a missing one as NULL, and DuckDB folds its
    term away: the plan is that of the expression written with the given centers alone."""
    parts = []
    for i, ts in enumerate((1712195500001778, 3 * 10**14, 3 * 10**14, 2 * 10**12, 2 * 10**12, 2 * 10**12, 10**15)):
        parts.append(tmp_path / f"t1.{i:04d}.json")
        parts[-1].write_text(f'[{{"ph": "i", "ts": {ts}}}]')
    assert scan.ts_centers(parts) == [2 * 10**12, 3 * 10**14, 1712200000000000]
    con = __import__("duckdb").connect()
    con.execute("CREATE TABLE t AS SELECT 1712195500001778.5::DECIMAL(24,3) AS x")
    c = 1712200000000000
    short = "CAST(TRY_CAST(x{} AS DECIMAL(15,3)) * 1000 AS BIGINT)"
    written = f"coalesce(({c} * 1000 + {short.format(f' - {c}')}), {short.format('')}, TRY_CAST(x * 1000 AS BIGINT))"
    bound = sqlmodules.text("ingest/read/nanoseconds", us="x", c1=c, c2=None, c3=None)
    plans = [con.execute(f"EXPLAIN SELECT {e} FROM t").fetchall()[0][1] for e in (bound, written)]
    assert plans[0] == plans[1]
    assert con.execute(f"SELECT {bound} FROM t").fetchall() == [(1712195500001778500,)]


LEGACY = {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 3, "dur": 1}


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ('"external id": 9', 9),
        ('"external\\u0020id": 9', 9),  # an escape spells the key: the bytes alone do not hold it
        ('"external id": "10"', 10),
        ('"External id": 8, "external id": 9', 8),
        ('"externalid": 9', None),
    ],
)
@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_the_legacy_external_id_key_is_read_when_the_bytes_may_hold_it(tmp_path, reads, key, expected, name):
    raw = [json.dumps(e) for e in clean_events()]
    raw.append(json.dumps(LEGACY)[:-1] + ', "args": {' + key + "}}")
    path = write(tmp_path / name, None, raw)
    got = rows(path)
    assert reads == ["typed"]
    assert got[-1]["external_id"] == expected
    assert got[1]["external_id"] == 7
    reads.clear()
    assert rows(path, exact_only=True) == got


@pytest.mark.parametrize(
    ("text", "legacy"),
    [
        (b'[{"args": {"External id": 1}}]', False),
        (b'[{"args": {"external id": 1}}]', True),
        (b'[{"args": {"e\\u0078ternal id": 1}}]', True),
        (b'[{"name": "a\\\\b \\"c\\" \\n"}]', False),  # escapes, none of them \u
    ],
)
def test_the_scan_says_whether_the_legacy_key_may_be_there(tmp_path, monkeypatch, text, legacy):
    path = tmp_path / "part.json"
    path.write_bytes(text)
    assert scan._scan(path).legacy is legacy
    monkeypatch.setattr(scan, "BLOCK_BYTES", 8)
    for pad in range(16):  # the key or escape across each block boundary
        path.write_bytes(b" " * pad + text)
        assert scan._scan(path).legacy is legacy
