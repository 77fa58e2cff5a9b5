"""tracekit export perfetto: the original events unchanged plus the attention tracks.

Each exported trace is checked three ways: parsed again with Python's json
module (``parse_float=Decimal``, so nothing is rounded) against the original
file, event by event and key by key; loaded again by tracekit, with the same
event counts per (ph, cat) and exact ts_ns/dur_ns per ordinal, plus exactly
the added events, counted independently from the source's gpu_op_stages and
attention_calls; and the added slices checked against the GPU ops they stand
for.
"""

from __future__ import annotations

import decimal
import gzip
import json
from collections import Counter
from decimal import Decimal

import pytest
from click.testing import CliRunner
from conftest import SHARED_TRACES, VARIANTS
from synthetic import post_variants

import tracekit
from tracekit.cli import cli, main
from tracekit.errors import TracekitError
from tracekit.present import export

WIDE = decimal.Context(prec=200)


def same(a, b) -> bool:
    """Two JSON values compared exactly: numbers by decimal value (1 == 1.000), never bool == int or "7" == 7.
    Walks both at once without building a canonical copy (the round trips compare about a million values)."""
    ta, tb = type(a), type(b)
    if ta is dict:
        return tb is dict and a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if ta is list:
        return tb is list and len(a) == len(b) and all(map(same, a, b))
    if ta in (int, Decimal):  # a bool's type is bool: never a number here
        return tb in (int, Decimal) and (a == b or WIDE.normalize(Decimal(a)) == WIDE.normalize(Decimal(b)))
    return ta is tb and a == b


def same_event(a, b) -> bool:
    """Two events compared as ``same`` does, but pid, tid and id by their text, since the events table keeps
    them as text and export writes an integer text as a number ("tid": "25738" -> 25738)."""
    if type(a) is not dict or type(b) is not dict:
        return type(a) is not dict and type(b) is not dict and same(a, b)
    ids = ("pid", "tid", "id")
    return a.keys() == b.keys() and all(str(v) == str(b[k]) if k in ids else same(v, b[k]) for k, v in a.items())


def read_json(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f, parse_float=Decimal)


def split(doc):
    """(top-level keys except traceEvents, events) of a Chrome JSON document (object or bare array)."""
    if isinstance(doc, list):
        return {}, doc
    return {k: v for k, v in doc.items() if k != "traceEvents"}, doc["traceEvents"]


def expected_added(trace):
    """The events export must add, counted from the source's attribution tables alone."""
    [(stages,)] = trace.con.execute("SELECT count(*) FROM gpu_op_stages WHERE stage <> 'other'").fetchall()
    [(streams,)] = trace.con.execute(
        "SELECT count(DISTINCT (o.pid, o.tid)) FROM gpu_op_stages g JOIN gpu_ops o USING (id) WHERE g.stage <> 'other'"
    ).fetchall()
    [(calls, devices)] = trace.con.execute(
        """SELECT count(*), count(DISTINCT pid) FROM (
               SELECT DISTINCT g.call_id, o.pid FROM gpu_op_stages g JOIN gpu_ops o USING (id)
               WHERE g.call_id IS NOT NULL)"""
    ).fetchall()
    return stages, streams, calls, devices


def counts(trace) -> Counter:
    return Counter({(r["ph"], r["cat"]): r["events"] for r in trace.query("event_counts").to_dicts()})


def check_round_trip(source_path, trace, out_path):
    """Export ``trace`` (loaded from ``source_path``) and check everything; returns (summary, reloaded doc)."""
    summary = export.export_perfetto(trace, out_path)
    original_top, original = split(read_json(source_path))
    top, events = split(read_json(out_path))

    # The original events, unchanged and in order; the file's top-level keys.
    assert same(top, original_top)
    assert len(events) >= len(original)
    bad = [i for i, (a, b) in enumerate(zip(original, events)) if not same_event(a, b)]
    assert not bad, f"{len(bad)} events differ, first #{bad[0]}: {original[bad[0]]} != {events[bad[0]]}"

    # Exactly the added events, and every slice with numeric ts and dur.
    added = events[len(original) :]
    stages, streams, calls, devices = expected_added(trace)
    by_cat = Counter((e["ph"], e.get("cat")) for e in added)
    assert by_cat[("X", export.STAGE_CAT)] == stages == summary.stage_events
    assert by_cat[("X", export.CALL_CAT)] == calls == summary.call_events
    assert summary.stage_tracks == streams
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in added if e["name"] == "thread_name"}
    assert len(threads) == streams + summary.call_tracks
    assert summary.call_tracks >= devices
    assert sum(by_cat.values()) == stages + calls + sum(1 for e in added if e["ph"] == "M")
    for e in events:
        if e.get("ph") == "X":
            for key in ("ts", "dur"):
                assert isinstance(e[key], (int, Decimal)) and not isinstance(e[key], bool), e

    # tracekit reads it back: same counts plus the added events, exact times per ordinal.
    with tracekit.load(out_path) as again:
        want = counts(trace)
        for (ph, cat), n in by_cat.items():
            want[(ph, cat)] += n
        assert counts(again) == want
        times = "SELECT ordinal, ph, name, pid, tid, ts_ns, dur_ns FROM events WHERE ordinal < ? ORDER BY ordinal"
        n = [len(original)]
        assert again.con.execute(times, n).fetchall() == trace.con.execute(times, n).fetchall()
        # Added slices are not GPU ops or CPU ops: the attribution is unchanged.
        attribution = "SELECT * FROM gpu_op_stages ORDER BY ALL"
        assert again.con.execute(attribution).fetchall() == trace.con.execute(attribution).fetchall()
        calls_sql = "SELECT * FROM attention_calls ORDER BY ALL"
        assert again.con.execute(calls_sql).fetchall() == trace.con.execute(calls_sql).fetchall()
    return summary, events[len(original) :]


def check_added_slices(trace, added):
    """Stage slices are the GPU ops with a stage, beside their stream; call slices span their ops."""
    rows = trace.con.execute(
        """SELECT o.pid, o.ts_ns, o.dur_ns, o.name, g.stage, g.source, g.call_id, o.tid
           FROM gpu_op_stages g JOIN gpu_ops o USING (id) WHERE g.stage <> 'other'"""
    ).fetchall()
    stream_of = {r[:4]: r[7] for r in rows}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in added if e["name"] == "thread_name"}
    sort_index = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in added if e["name"] == "thread_sort_index"}
    ns = lambda us: int(WIDE.multiply(us, 1000))  # noqa: E731 - exact µs -> ns
    slices = Counter()
    for e in (e for e in added if e.get("cat") == export.STAGE_CAT):
        a = e["args"]
        assert e["name"] == a["stage"]
        key = (str(e["pid"]), ns(e["ts"]), ns(e["dur"]), a["kernel"])
        slices[(*key, a["stage"], a["source"], a["call_id"])] += 1
        stream_tid = stream_of[key]
        assert str(e["tid"]) != stream_tid and names[(e["pid"], e["tid"])].endswith(" · attention stages")
        assert isinstance(e["tid"], int) == stream_tid.lstrip("-").isdigit()  # a number beside numbers
    assert slices == Counter(r[:7] for r in rows)
    assert sort_index.keys() <= names.keys()

    spans = dict(
        ((str(pid), call_id), (ts, end))
        for pid, call_id, ts, end in trace.con.execute(
            """SELECT o.pid, g.call_id, min(o.ts_ns), max(o.end_ns) FROM gpu_op_stages g JOIN gpu_ops o USING (id)
               WHERE g.call_id IS NOT NULL GROUP BY ALL"""
        ).fetchall()
    )
    impl = dict(trace.con.execute("SELECT call_id, impl FROM attention_calls").fetchall())
    lanes: dict = {}
    for e in (e for e in added if e.get("cat") == export.CALL_CAT):
        ts, end = spans[(str(e["pid"]), e["args"]["call_id"])]
        assert (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) == (ts, end)
        assert e["name"] == f"attention:{impl[e['args']['call_id']]}"
        assert names[(e["pid"], e["tid"])].startswith("attention calls")
        lanes.setdefault((e["pid"], e["tid"]), []).append((ts, end))
    for spans_on_thread in lanes.values():  # no two call slices on one thread overlap
        spans_on_thread.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans_on_thread, spans_on_thread[1:]))


@pytest.fixture(scope="module")
def variant_files(inputs):
    """The post's six variants, and flash with 2021 category names and string tids ("stream 7"): the
    session's files (``inputs``), so ``inputs.trace`` shares each one's load with the other modules."""
    files = {name: (inputs.file(v, f"{name}.json.gz"), v) for name, v in post_variants().items()}
    legacy = post_variants(["flash"], legacy=True)["flash"]
    files["flash_legacy"] = (inputs.file(legacy, "flash_legacy.json.gz"), legacy)
    return files


@pytest.mark.parametrize("name", [*VARIANTS, "flash_legacy"])
def test_synthetic_variants_round_trip(variant_files, inputs, name, tmp_path):
    path, variant = variant_files[name]
    trace = inputs.trace(path)
    summary, added = check_round_trip(path, trace, tmp_path / "out.json.gz")
    check_added_slices(trace, added)
    orphan_ns = dict(
        trace.con.execute(
            "SELECT stage, sum(dur_ns) FROM gpu_op_stages WHERE orphan AND stage <> 'other' GROUP BY stage"
        ).fetchall()
    )
    # By construction: three forwards, one call each; in the fused variants the warm-up step's
    # orphan kernel is the attention kernel itself, a call of its own (docs/attribution.md).
    fused = name.startswith(("efficient", "flash", "cudnn"))
    assert summary.stage_tracks == 1 and summary.call_tracks == 1
    assert summary.call_events == 3 + variant.truth["orphans"] * fused
    # That orphan-only call is marked as such (the queries count it only with include_orphans=true).
    marked = [e for e in added if e.get("cat") == export.CALL_CAT and e["args"].get("orphan")]
    assert len(marked) == variant.truth["orphans"] * fused
    stage_ns = Counter()
    for e in added:
        if e.get("cat") == export.STAGE_CAT:
            stage_ns[e["name"]] += int(e["dur"] * 1000)
    assert {k: v - orphan_ns.get(k, 0) for k, v in stage_ns.items()} == variant.truth["stage_ns"]
    threads = {e["args"]["name"]: e for e in added if e["name"] == "thread_name"}
    stage_thread = threads["stream 7 · attention stages"]
    assert stage_thread["pid"] == 0  # the device, as the GPU events write it
    if name == "flash_legacy":
        assert stage_thread["tid"] == "stream 7 · attention stages"
        assert threads["attention calls"]["tid"] == "attention calls"
    else:
        assert stage_thread["tid"] == export.STAGE_TID_BASE + 7
        sort = {e["tid"]: e["args"]["sort_index"] for e in added if e["name"] == "thread_sort_index"}
        assert sort[stage_thread["tid"]] == 7  # the stream's own sort index: right after it, by name
        assert sort[threads["attention calls"]["tid"]] == 6


# The two largest (xDiT's compiled pipeline, 8.7 s; the 2021 ResNet-50, 6.8 s) under TRACEKIT_SLOW: every run
# keeps the others, the same code paths on smaller files.
_SLOW_ROUND_TRIPS = (
    "tracelens/mi300_xdit_flux1_aiter-sage_t5-clip-eager.json.gz",
    "kineto/v100_resnet50_2021_legacy.json.gz",
)


@pytest.mark.parametrize(
    "rel", [pytest.param(r, marks=pytest.mark.slow) if r in _SLOW_ROUND_TRIPS else r for r in SHARED_TRACES]
)
def test_shared_traces_round_trip(load_shared, shared_dir, rel, tmp_path):
    trace = load_shared(rel)
    _, added = check_round_trip(shared_dir / rel, trace, tmp_path / "out.json")
    check_added_slices(trace, added)


def test_ns_fractions_survive_exactly(load_shared, shared_dir, tmp_path):
    # Float µs with ns fractions: every ts/dur read back equals the file's value x 1000, in integers.
    rel = "hta/v100_ns_resolution.json.gz"
    out = tmp_path / "out.json.gz"
    export.export_perfetto(load_shared(rel), out)
    _, original = split(read_json(shared_dir / rel))
    ns = lambda us: None if us is None else int(WIDE.multiply(Decimal(us), 1000))  # noqa: E731
    assert sum(1 for e in original if isinstance(e.get("ts"), Decimal) and e["ts"] % 1) > 1000
    with tracekit.load(out) as again:
        got = again.con.execute(
            "SELECT ts_ns, dur_ns FROM events WHERE ordinal < ? ORDER BY ordinal", [len(original)]
        ).fetchall()
    assert got == [(ns(e.get("ts")), ns(e.get("dur"))) for e in original]


def test_digit_string_tids_come_back_as_the_thread_number(load_shared, shared_dir, tmp_path):
    # 2021 Kineto writes the same thread as "tid": "25738" (ops) and "tid": 25738 (instants,
    # flows); the export writes both as 25738, one thread, and keeps "stream 7" a string.
    rel = "kineto/v100_resnet50_2021_legacy.json.gz"
    out = tmp_path / "out.json"
    export.export_perfetto(load_shared(rel), out)
    _, original = split(read_json(shared_dir / rel))
    _, events = split(read_json(out))
    kinds = Counter((type(e.get("pid")).__name__, type(e.get("tid")).__name__) for e in original)
    assert kinds[("int", "str")] > 0 and kinds[("int", "int")] > 0

    def written(v):
        return int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v

    ids = [(e.get("pid"), e.get("tid")) for e in events[: len(original)]]
    assert ids == [(written(e.get("pid")), written(e.get("tid"))) for e in original]
    assert any(isinstance(t, str) and t.startswith("stream ") for _, t in ids)


def test_vllm_trace_gets_stage_and_call_tracks(load_shared, shared_dir, tmp_path):
    trace = load_shared("tracelens/b200_vllm_eager_paged-fp8.json.gz")
    summary = export.export_perfetto(trace, tmp_path / "vllm.json.gz")
    stages, streams, calls, _ = expected_added(trace)
    assert stages > 0 and calls > 0
    assert (summary.stage_events, summary.stage_tracks, summary.call_events) == (stages, streams, calls)


@pytest.fixture(scope="module")
def two_traces(variant_files, tmp_path_factory):
    """naive and flash in one .duckdb, written once for the module (the tests only read it)."""
    db = tmp_path_factory.mktemp("two") / "two.duckdb"
    tracekit.load([variant_files["naive"][0], variant_files["flash"][0]], output=db).close()
    return db


def test_cli_exports_one_of_several(two_traces, tmp_path):
    out = tmp_path / "flash.json.gz"
    res = CliRunner().invoke(cli, ["export", "perfetto", str(two_traces), "-o", str(out), "--trace", "flash"])
    assert res.exit_code == 0, res.output
    assert res.output == f"{out}: flash: 73 events + 4 stage slices on 1 stream track(s) + 4 attention call slices\n"
    with gzip.open(out, "rt") as f:
        doc = json.load(f)
    assert doc["traceName"] == "8_16_1024_64_flash_eager" and len(doc["traceEvents"]) == 73 + 4 + 4 + 4
    res = CliRunner().invoke(
        cli, ["export", "perfetto", str(two_traces), "-o", str(tmp_path / "n.json"), "--trace", "naive", "-q"]
    )
    assert res.exit_code == 0 and res.output == ""
    json.loads((tmp_path / "n.json").read_text())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--trace", "nope"], "Error: no trace labelled 'nope' (the source holds: naive, flash)\n"),
        ([], "Error: the source holds 2 traces (naive, flash): choose one with --trace LABEL\n"),
    ],
)
def test_cli_bad_trace_choice(two_traces, tmp_path, capsys, args, message):
    out = tmp_path / "out.json"
    assert main(["export", "perfetto", str(two_traces), "-o", str(out), *args]) == 1
    assert capsys.readouterr().err == message
    assert not out.exists()


def test_cli_unwritable_output(variant_files, tmp_path, capsys):
    out = tmp_path / "no_such_dir" / "out.json.gz"
    assert main(["export", "perfetto", str(variant_files["flash"][0]), "-o", str(out)]) == 1
    assert capsys.readouterr().err == f"Error: {out}: directory {out.parent} does not exist\n"
    assert not out.parent.exists()


def test_failure_leaves_no_output(variant_files, inputs, tmp_path, monkeypatch):
    out = tmp_path / "out.json.gz"
    out.write_text("previous export")

    def broken(call):
        raise TracekitError("broken on purpose")

    monkeypatch.setattr(export, "_call_line", broken)
    with pytest.raises(TracekitError, match="on purpose"):
        export.export_perfetto(inputs.trace(variant_files["flash"][0]), out)
    assert out.read_text() == "previous export"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json.gz"]  # no temporary file left


def test_python_api_chooses_by_label_or_id(two_traces, tmp_path):
    with tracekit.open(two_traces) as trace:
        with pytest.raises(TracekitError, match="choose one with --trace"):
            export.export_perfetto(trace, tmp_path / "x.json")
        by_label = export.export_perfetto(trace, tmp_path / "a.json", label="naive")
        by_id = export.export_perfetto(trace, tmp_path / "b.json", trace_id=1)
    assert by_label.trace == by_id.trace == "naive"
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


# Values whose JSON type or text the events table's columns alone could not tell, written as text
# so that every number is exactly as a profiler could write it.
EDGE_EVENTS = r"""[
{"ph": "X", "cat": "cpu_op", "name": "quote \" backslash \\ tab \t \u00e9 \u2028", "pid": 7, "tid": "7",
 "ts": 1, "dur": 0.001, "args": {"f": 1.25, "big": 123456789012345678901234567890, "none": null}},
{"ph": "X", "cat": "cpu_op", "name": "float tid", "pid": "7", "tid": 7.0, "ts": 2, "dur": 1},
{"ph": "i", "name": "negative", "s": "t", "pid": 7, "tid": 7, "ts": -12.5},
{"ph": "X", "cat": "cpu_op", "name": "epoch ns", "pid": 7, "tid": 7, "ts": 1700000000123456.789, "dur": 0.5},
{"ph": "s", "cat": "ac2g", "name": "big id", "pid": 7, "tid": 7, "ts": 3, "id": 18446744073709551617, "bp": "e"},
{"ph": "f", "cat": "ac2g", "name": "string id", "pid": 7, "tid": 7, "ts": 4, "id": "0x1f", "bp": "e"},
{"ph": "i", "name": "Record Window End", "s": "g", "pid": "", "tid": "", "ts": 5},
{"ph": "X", "cat": "Trace", "name": "span", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 0, "dur": 9},
{"name": "thread_name", "ph": "M", "pid": 7, "tid": 7, "args": {"name": "no ts"}},
{"ph": "X", "cat": "cpu_op", "name": "extra key", "pid": 7, "tid": 7, "ts": 6, "dur": 1, "flow_out": true}
]"""


@pytest.mark.parametrize("form", ["object", "array"])
def test_edge_values_round_trip(tmp_path, form):
    path = tmp_path / "edge.json"
    text = EDGE_EVENTS
    if form == "object":
        text = f'{{"schemaVersion": 1, "traceEvents": {EDGE_EVENTS}, "custom": [1, "y"]}}'
    path.write_text(text, encoding="utf-8")
    with tracekit.load(path) as trace:
        summary, added = check_round_trip(path, trace, tmp_path / "out.json")
    assert (summary.events, added) == (10, [])
    out = (tmp_path / "out.json").read_text(encoding="utf-8")
    # Rebuilt events with exact µs text; events kept whole in extra as written.
    for written in (
        '"ts":-12.500,',
        '"ts":1700000000123456.789,"dur":0.500}',
        '"id":18446744073709551617,',
        '"id":"0x1f",',
        '"pid":"","tid":""',
        '"pid":7,"tid":7,',
        '"pid":7,"tid":"7.0"',
    ):
        assert written in out
