"""Linking on synthetic traces whose ground truth is known by construction.

The traces come from tests/synthetic.py (the post's attention variants and a
hand-built trace with a graph launch, orphans and nested annotations); every
expected number below is computed by the builder, independently of tracekit.
"""

from __future__ import annotations

import pytest
from conftest import VARIANTS, load_post_variants
from synthetic import TraceBuilder

import tracekit


@pytest.fixture(scope="module", params=[False, True], ids=["modern", "legacy"])
def variants(request, inputs):
    """The post's variants with modern or 2021 category names, loaded once per session (shared: read only)."""
    loaded = load_post_variants(inputs, legacy=request.param)
    return {name: (trace, v.truth) for name, (trace, v) in loaded.items()}


@pytest.mark.parametrize("name", VARIANTS)
def test_gpu_timeline_equals_truth(name, variants):
    trace, truth = variants[name]
    linked = trace.query("gpu_timeline").to_dicts()[0]
    assert linked["gpu_ops"] == len(truth["gpu_ops"])
    assert linked["orphan_gpu_ops"] == truth["orphans"] == 1
    assert linked["busy_ns"] == truth["busy_ns_linked"]
    every = trace.query("gpu_timeline", include_orphans=True).to_dicts()[0]
    assert every["busy_ns"] == truth["busy_ns"]
    assert every["span_ns"] == truth["span_ns"]


@pytest.mark.parametrize("name", VARIANTS)
def test_every_gpu_op_links_to_its_launch_and_op(name, variants):
    trace, truth = variants[name]
    got = {
        r["ts_ns"]: r
        for r in trace.sql("SELECT ts_ns, name, orphan, launch_api, cpu_op_name, annotations FROM gpu_ops").to_dicts()
    }
    assert len(got) == len(truth["gpu_ops"])
    for op in truth["gpu_ops"]:
        row = got[op["ts_ns"]]
        assert row["name"] == op["name"]
        assert row["orphan"] == op["orphan"]
        if not op["orphan"]:
            assert row["launch_api"] == op["launch_api"]
            assert row["cpu_op_name"] == op["op"]
            assert row["annotations"] == [f"ProfilerStep#{op['step']}", truth["region"]]


@pytest.mark.parametrize("name", VARIANTS)
def test_region_cpu_time_equals_truth(name, variants):
    trace, truth = variants[name]
    region = truth["region"]
    durs = trace.sql(f"SELECT dur_ns FROM annotations WHERE name = '{region}' ORDER BY ts_ns")["dur_ns"].to_list()
    assert durs == truth["regions"][region]["cpu_time_ns"]


def test_graph_launch_orphans_and_nesting(tmp_path):
    b = TraceBuilder()
    b.orphan_kernel("leftover_from_warmup", 0, 2_000)
    step = b.profiler_step(1, 10_000, None)
    outer = b.user_annotation("outer", 12_000, None)
    b.op_with_kernels("aten::linear", 14_000, [("gemm_a", None, 10_000), ("bias_add", None, 3_000)])
    inner = b.user_annotation("inner", 60_000, None)
    corr = b.graph_launch(62_000, [("graph_k0", None, 4_000), ("graph_k1", None, 5_000), ("graph_k2", None, 6_000)])
    b.close(inner, 140_000)
    b.close(outer, 162_000)
    b.close(step, 210_000)
    b.finish()
    path = tmp_path / "hand.json"
    b.write(path)
    truth = b.truth
    with tracekit.load(path) as trace:
        graph = trace.sql(
            "SELECT name, via_graph, launch_api, annotations, correlation FROM gpu_ops WHERE name LIKE 'graph_k%' ORDER BY ts_ns"
        ).rows()
        assert [g[0] for g in graph] == ["graph_k0", "graph_k1", "graph_k2"]
        assert all(g[1] and g[2] == "cudaGraphLaunch" and g[4] == corr for g in graph)
        assert all(g[3] == ["ProfilerStep#1", "outer", "inner"] for g in graph)
        linear = trace.sql("SELECT annotations, cpu_op_name, top_op_name FROM gpu_ops WHERE name = 'gemm_a'").row(0)
        assert linear == (["ProfilerStep#1", "outer"], "aten::linear", "aten::linear")
        assert trace.sql("SELECT orphan FROM gpu_ops WHERE name = 'leftover_from_warmup'").row(0) == (True,)
        row = trace.query("gpu_timeline").to_dicts()[0]
        assert (row["gpu_ops"], row["orphan_gpu_ops"]) == (truth["gpu_ops"], truth["gpu_ops_orphan"])
        assert row["busy_ns"] == truth["busy_ns_linked"]
        depth = dict(trace.sql("SELECT name, depth FROM annotations").rows())
        assert depth == {"ProfilerStep#1": 0, "outer": 1, "inner": 2}


def test_child_bleeding_past_its_parent_stays_its_child(tmp_path):
    b = TraceBuilder()
    parent = b.cpu_op("aten::parent", 1_000, 10_000)
    b.cpu_op("aten::child", 2_000, 9_300)  # ends 300 ns after its parent: profiler clock skew
    b.cpu_op("aten::next", 11_500, 1_000)  # starts after the parent ended, before the child did
    b.finish()
    path = tmp_path / "bleed.json"
    b.write(path)
    assert parent
    with tracekit.load(path) as trace:
        rows = dict(
            (name, (depth, parent_name))
            for name, depth, parent_name in trace.sql(
                "SELECT c.name, c.depth, p.name AS parent FROM cpu_ops c LEFT JOIN cpu_slices p ON p.id = c.parent_id"
            ).rows()
        )
        assert rows == {"aten::parent": (0, None), "aten::child": (1, "aten::parent"), "aten::next": (0, None)}
        self_ns = dict(trace.sql("SELECT name, self_ns FROM cpu_ops").rows())
        assert self_ns["aten::parent"] == 10_000 - (11_000 - 2_000)
