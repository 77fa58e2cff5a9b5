"""Every real trace in ../shared/traces loads completely and exactly."""

from __future__ import annotations

import csv
import functools
import gzip
import json
from collections import Counter
from decimal import Decimal

import pytest
from conftest import SHARED_TRACES


def raw_events(path):
    """The file's events, parsed independently of tracekit with exact decimals."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh, parse_float=Decimal)
    return doc, (doc["traceEvents"] if isinstance(doc, dict) else doc)


@pytest.fixture(scope="module")
def raw():
    """``raw_events``, each file parsed once for the module (three tests read every trace): read only."""
    return functools.cache(raw_events)


def test_list_covers_every_shared_trace(shared_dir):
    on_disk = sorted(str(p.relative_to(shared_dir)) for p in shared_dir.rglob("*.json.gz"))
    assert on_disk == sorted(SHARED_TRACES)


@pytest.mark.parametrize("rel", SHARED_TRACES)
def test_event_counts_match_an_independent_count(rel, shared_dir, load_shared, raw):
    _, events = raw(shared_dir / rel)
    expected = Counter((e.get("ph"), e.get("cat")) for e in events)
    got = {(r["ph"], r["cat"]): r["events"] for r in load_shared(rel).query("event_counts").to_dicts()}
    assert got == dict(expected)
    assert sum(got.values()) == len(events)


@pytest.mark.parametrize("rel", SHARED_TRACES)
def test_times_are_exact_nanoseconds(rel, shared_dir, load_shared, raw):
    _, events = raw(shared_dir / rel)
    expected = [
        (i, int(Decimal(e["ts"]) * 1000), None if "dur" not in e else int(Decimal(e["dur"]) * 1000))
        for i, e in enumerate(events)
    ]
    rows = load_shared(rel).sql("SELECT ordinal, ts_ns, dur_ns FROM events ORDER BY ordinal").rows()
    assert rows == expected


@pytest.mark.parametrize("rel", SHARED_TRACES)
def test_args_and_top_level_keys_are_kept(rel, shared_dir, load_shared, raw):
    doc, events = raw(shared_dir / rel)
    trace = load_shared(rel)
    with_args = sum(1 for e in events if "args" in e)
    assert (
        trace.sql(
            "SELECT count(*) AS n FROM events e JOIN "
            "(SELECT id, args FROM slices UNION ALL SELECT id, args FROM instants UNION ALL "
            " SELECT id, args FROM flows UNION ALL SELECT id, args FROM metadata_events UNION ALL "
            " SELECT id, args FROM counters UNION ALL SELECT id, args FROM other_events) a USING (id) "
            "WHERE a.args IS NOT NULL"
        )["n"][0]
        == with_args
    )
    meta = json.loads(trace.sql("SELECT metadata FROM traces")["metadata"][0])
    if isinstance(doc, dict):
        assert set(meta) == set(doc) - {"traceEvents"}


def _expected_timeline(path):
    with open(path) as fh:
        return {r["type"]: float(r["time ms"]) * 1e6 for r in csv.DictReader(fh)}


@pytest.mark.parametrize("name", ["h100_bert-small_sdpa-flash", "mi300_bert-small_sdpa-flash"])
def test_gpu_timeline_matches_tracelens(name, shared_dir, load_shared):
    expected = _expected_timeline(shared_dir / "tracelens" / f"{name}.expected" / "gpu_timeline.csv")
    row = load_shared(f"tracelens/{name}.json.gz").query("gpu_timeline").to_dicts()[0]
    assert row["busy_ns"] == pytest.approx(expected["busy_time"], rel=1e-3)
    assert row["span_ns"] == pytest.approx(expected["total_time"], rel=1e-3)
    assert row["idle_ns"] == pytest.approx(expected["idle_time"], rel=1e-3)
    assert row["orphan_gpu_ops"] == 0 and row["gpu_ops"] == 61


@pytest.mark.parametrize("rel", SHARED_TRACES)
def test_gpu_op_events_agrees_with_the_linked_gpu_ops(rel, load_shared):
    """The view gpu_timeline reads before linking has gpu_ops' rows and orphan flags."""
    trace = load_shared(rel)
    row = trace.sql(
        """SELECT (SELECT count(*) FROM gpu_op_events) AS events_view, (SELECT count(*) FROM gpu_ops) AS linked,
                  (SELECT count(*) FROM gpu_ops g JOIN gpu_op_events e USING (id)
                   WHERE e.linked = g.orphan OR e.ts_ns <> g.ts_ns OR e.dur_ns <> g.dur_ns) AS disagree"""
    ).to_dicts()[0]
    assert row["events_view"] == row["linked"] and row["disagree"] == 0


@pytest.mark.parametrize("rel", SHARED_TRACES)
def test_every_launch_link_agrees_with_its_ac2g_flow(rel, load_shared):
    trace = load_shared(rel)
    bad = trace.sql("SELECT count(*) AS n FROM runtime_calls WHERE flow_matches = false")["n"][0]
    assert bad == 0
    # A linked GPU op and its launch are the two ends of one ac2g flow when flows exist.
    mism = trace.sql(
        """SELECT count(*) AS n FROM gpu_ops g JOIN flows f
             ON f.trace_id = g.trace_id AND f.kind = 'ac2g' AND f.ph = 'f'
            AND TRY_CAST(f.flow_id AS BIGINT) = g.correlation AND f.ts_ns = g.ts_ns
           WHERE g.orphan"""
    )["n"][0]
    assert mism == 0


def test_legacy_categories_normalize(load_shared):
    trace = load_shared("kineto/v100_resnet50_2021_legacy.json.gz")
    kinds = dict(
        trace.sql(
            "SELECT cat, list(DISTINCT kind ORDER BY kind) AS kinds FROM events WHERE cat IS NOT NULL GROUP BY cat"
        ).rows()
    )
    assert kinds == {
        "Operator": ["cpu_op", "user_annotation"],
        "Runtime": ["runtime"],
        "Kernel": ["kernel"],
        "Memcpy": ["memcpy"],
        "Memset": ["memset"],
        "async": ["ac2g"],
        "Trace": ["trace_span"],
    }
    # 2021 record_function ranges were filed as Operator; they are annotations again.
    steps = trace.sql("SELECT DISTINCT annotations[1] AS a FROM gpu_ops WHERE len(annotations) > 0 ORDER BY a")["a"]
    assert steps.to_list() == sorted(f"ProfilerStep#{n}" for n in range(5, 11))
    linked = trace.sql(
        "SELECT count(*) FILTER (WHERE NOT orphan) AS l, count(*) AS n, "
        "count(*) FILTER (WHERE external_id IS NULL) AS no_ext FROM gpu_ops"
    ).to_dicts()[0]
    assert linked == {"l": 9096, "n": 9096, "no_ext": 0}  # lowercase "external id" is read too


def test_hip_graph_launch_maps_to_many_gpu_ops(load_shared):
    trace = load_shared("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz")
    rows = trace.sql(
        "SELECT launch_api, count(*) AS ops FROM gpu_ops WHERE via_graph GROUP BY ALL ORDER BY ops DESC"
    ).rows()
    assert rows and rows[0][0] == "hipGraphLaunch" and rows[0][1] > 100
    assert trace.sql("SELECT count(*) AS n FROM gpu_ops WHERE orphan")["n"][0] == 0


def test_launch_stack_and_annotations(load_shared):
    trace = load_shared("tracelens/h100_bert-small_sdpa-flash.json.gz")
    flash = trace.sql(
        "SELECT cpu_op_name, top_op_name, launch_api FROM gpu_ops WHERE name LIKE '%flash_fwd_kernel%'"
    ).rows()
    assert len(flash) == 4
    assert set(flash) == {("aten::_flash_attention_forward", "aten::scaled_dot_product_attention", "cudaLaunchKernel")}
    # Depth and parents are consistent: a parent encloses its child (up to the bleed tolerance).
    bad = trace.sql(
        """SELECT count(*) AS n FROM cpu_slices c JOIN cpu_slices p ON p.id = c.parent_id
           WHERE c.depth <> p.depth + 1 OR c.ts_ns < p.ts_ns OR c.end_ns > p.end_ns + 1000"""
    )["n"][0]
    assert bad == 0


def test_rank_from_distributed_info(load_shared):
    assert load_shared("hta/cpu_only_rank34.json.gz").sql(
        "SELECT rank, world_size, rank_source FROM traces"
    ).rows() == [(34, 300, "distributedInfo")]
    assert load_shared("hta/legacy_runtime_kernel_cats.json.gz").sql("SELECT rank FROM traces").rows() == [(1,)]


def test_devices_table(load_shared):
    rows = (
        load_shared("tracelens/h100_bert-small_sdpa-flash.json.gz")
        .sql("SELECT device, name, num_sms, warp_size FROM devices")
        .rows()
    )
    assert rows and rows[0][1].startswith("NVIDIA H100") and rows[0][2] == 132 and rows[0][3] == 32


def test_load_all_shared_traces_at_once(shared_dir, tmp_path):
    import tracekit

    with tracekit.load(shared_dir, output=tmp_path / "all.duckdb") as trace:
        n, events = trace.sql("SELECT count(*) AS n, sum(events) AS e FROM traces").row(0)
        assert n == len(SHARED_TRACES)
        assert trace.sql("SELECT count(*) AS n FROM events")["n"][0] == events
        labels = trace.sql("SELECT trace FROM traces ORDER BY trace")["trace"].to_list()
        assert len(set(labels)) == n
