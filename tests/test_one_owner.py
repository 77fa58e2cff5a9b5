"""One owner per definition: each pair of views that used to disagree now reads the same definition.

- what a GPU op's bucket is (memcpy, communication, computation): the gpu_op_category macro, read by
  gpu_breakdown and op_summary / op_categories alike (a memset was computation in one, memcpy in the other;
  hccl kernels were communication in one and not the other);
- which GPU ops were launched inside the trace: the orphan_cause / is_orphan macros, read by gpu_ops (linked)
  and gpu_op_events (before linking) alike;
- what a call counts for per-call figures: the counts_as_call macro (call_counts), read by the report's
  headline and diff --per-call alike (6 against 12 calls on a training step before);
- how a duration is shown: present.values.format_unit, which the table format's duration columns use too.

The synthetic trace's truth is by construction: each GPU op is launched by a CPU op of its own name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic import TraceBuilder

import tracekit
from tracekit import diff

H200 = Path(__file__).resolve().parent.parent / "sample_traces" / "gpu_h200"

# (CPU op, GPU op name, what gpu_breakdown's bucket must be); kernels by default, Memcpy/Memset by name.
OPS = [
    ("my::copy", "Memcpy DtoD (Device -> Device)", "memcpy"),
    ("my::fill", "Memset (Device)", "computation"),
    ("my::hccl", "HcclAllReduce_f32_kernel", "communication"),
    ("my::nccl", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication"),
    ("my::blit", "__amd_rocclr_copyBuffer", "memcpy"),
    ("my::gemm", "ampere_sgemm_128x64_tn", "computation"),
]


@pytest.fixture(scope="module")
def buckets_trace(tmp_path_factory):
    b = TraceBuilder()
    t = 0
    for op, gpu, _ in OPS:
        extra = {"bytes": 4096} if gpu.startswith(("Memcpy", "Memset")) else {}
        b.op_with_kernels(op, t, [(gpu, None, 3_000, extra)])
        t += 40_000
    b.orphan_kernel("late_kernel", t + 5_000, 2_000)  # its launch is before the trace: an orphan
    b.finish()
    path = tmp_path_factory.mktemp("owners") / "buckets_by_construction.json.gz"
    b.write(path)
    trace = tracekit.load(path)
    yield trace
    trace.close()


def test_op_categories_take_memcpy_and_communication_from_the_gpu_op_category_macro(buckets_trace):
    bucket = dict(buckets_trace.sql("SELECT name, gpu_op_category(kind, name) FROM gpu_ops").fetchall())
    category = {r["op"]: r["category"] for r in buckets_trace.query("op_summary").pl().to_dicts()}
    for op, gpu, want in OPS:
        assert bucket[gpu] == want, gpu
        if want in ("memcpy", "communication"):
            assert category[op] == want, f"{op}: op_summary says {category[op]}, gpu_breakdown {want}"
        else:
            assert category[op] not in ("memcpy", "communication"), f"{op}: computation in gpu_breakdown"
    # The breakdown's buckets sum what the categories sum (each bucket is one GPU op of 3 µs here).
    rows = {r["category"]: r["time_ns"] for r in buckets_trace.query("gpu_breakdown").pl().to_dicts()}
    cats = {r["category"]: r["kernel_ns"] for r in buckets_trace.query("op_categories").pl().to_dicts()}
    assert rows["memcpy"] == cats["memcpy"] == 2 * 3_000
    assert rows["communication"] == cats["communication"] == 2 * 3_000


def test_gpu_ops_and_gpu_op_events_agree_on_orphans(buckets_trace):
    linked = buckets_trace.sql("SELECT id, orphan, orphan_cause FROM gpu_ops ORDER BY id").fetchall()
    early = buckets_trace.sql("SELECT id, orphan, orphan_cause FROM gpu_op_events ORDER BY id").fetchall()
    assert linked == early
    assert [r[1:] for r in linked if r[1]] == [(True, "launched_before_trace")]


def test_gpu_ops_and_gpu_op_events_agree_on_orphans_in_real_traces(load_shared):
    for rel in ("hta/a100_nccl_rank0.json.gz", "tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz"):
        trace = load_shared(rel)
        differ = trace.sql(
            "SELECT count(*) FROM gpu_ops g JOIN gpu_op_events e USING (id) "
            "WHERE g.orphan <> e.orphan OR g.orphan_cause IS DISTINCT FROM e.orphan_cause"
        ).fetchall()[0][0]
        assert differ == 0, rel
        assert (
            trace.sql("SELECT count(*) FROM gpu_ops").fetchall()
            == trace.sql("SELECT count(*) FROM gpu_op_events").fetchall()
        )


def test_per_call_figures_divide_by_the_same_calls_everywhere():
    trace = tracekit.load(H200 / "llama_train_sdpa.json.gz")
    try:
        counts = trace.query("call_counts").pl().to_dicts()
        (headline,) = trace.query("headline").pl().to_dicts()
        _, divisor = diff.totals(diff.Side(trace), "stage")
        assert [(c["calls"], c["backward_calls"]) for c in counts] == [(6, 6)]  # a training step: 6 forward, 6 backward
        assert headline["attention_calls"] == divisor == counts[0]["calls"]
        assert headline["backward_calls"] == counts[0]["backward_calls"]
        # diff --per-call of a trace with itself: per-call time is the total over those calls.
        per_call = {r["stage"]: r for r in diff.compare(trace, trace, per_call=True).pl().to_dicts()}
        totals = {r["stage"]: r for r in diff.compare(trace, trace).pl().to_dicts()}
        for stage, row in totals.items():
            assert per_call[stage]["a_ns_per_call"] == pytest.approx(row["a_ns"] / divisor)
    finally:
        trace.close()


def test_durations_show_one_way(buckets_trace):
    from tracekit.present import humanize, values

    # The units change at 10 ms and 10 s, as the table format's do.
    shown = {ns: values.format_unit(ns, "ns") for ns in (12_345, 9_999_999, 10_000_000, 123_456_789, 9_999_999_999)}
    assert shown == {
        12_345: "12.3 µs",
        9_999_999: "10,000.0 µs",
        10_000_000: "10.000 ms",
        123_456_789: "123.457 ms",
        9_999_999_999: "10,000.000 ms",
    }
    # The table format's duration columns read the same owner (gpu_ns shows as µs or ms, with its unit in the header).
    table = buckets_trace.sql("SELECT 12345::BIGINT AS gpu_ns").arrow()
    cols, body = humanize.cells(table)
    assert cols[0].header == "gpu_µs" and f"{body[0][0]} µs" == values.format_unit(12_345, "ns") == "12.3 µs"
    assert values.format_unit(12_000_000_000, "ns") == "12.000 s"  # the table shows such a column in s too


@pytest.mark.parametrize(
    "name,dims,shape",
    [
        ("aten::linear", [[2, 3, 8], [16, 8], [16]], [1, 6, 16, 8]),
        ("aten::addmm", [[16], [6, 8], [8, 16]], [1, 6, 16, 8]),
        ("aten::mm", [[6, 8], [8, 16]], [1, 6, 16, 8]),
        ("aten::_scaled_mm", [[6, 8], [8, 16], [], []], [1, 6, 16, 8]),
        ("aten::bmm", [[4, 6, 8], [4, 8, 16]], [4, 6, 16, 8]),
        ("aten::baddbmm", [[4, 6, 16], [4, 6, 8], [4, 8, 16]], [4, 6, 16, 8]),
        ("aten::matmul", [[2, 4, 6, 8], [8, 16]], [8, 6, 16, 8]),
        ("aten::add", [[6, 8], [6, 8]], None),
    ],
)
def test_gemm_shapes_are_decoded_once(buckets_trace, name, dims, shape):
    """gemm_shape and gemm_kn are the one decoding of GEMM shapes (gemm_calls' FLOPs read the one, the
    attribution's projection widths the other, and the shape's k and n are gemm_kn's); by construction."""
    import json

    got = buckets_trace.sql(
        "SELECT gemm_shape($name, $dims::JSON), gemm_kn($name, $dims::JSON)", {"name": name, "dims": json.dumps(dims)}
    )
    # gemm_kn is where the operands are read (the attribution's projection widths use it alone): its [k, n]
    # is the shape's.
    assert got.fetchall() == [(shape, None if shape is None else [shape[3], shape[2]])]
    if shape is not None:
        assert name in buckets_trace.sql("SELECT gemm_op_names()").fetchall()[0][0]
