"""The breakdown.* queries: against the peers' published outputs and synthetic traces whose truth is known.

Synthetic traces here are laid out by hand so every figure is a sum of a few
interval lengths written in the test (truth by construction). The peers'
outputs are the TraceLens reports shipped next to the shared traces
(``tracelens/*.expected/``).
"""

from __future__ import annotations

import csv

import pytest
from synthetic import TraceBuilder

import tracekit

BERT = ["h100_bert-small_sdpa-flash", "mi300_bert-small_sdpa-flash"]
# TraceLens's gpu_timeline.csv row -> gpu_breakdown category.
TIMELINE = {
    "computation_time": "computation",
    "total_comm_time": "communication",
    "total_memcpy_time": "memcpy",
    "exposed_comm_time": "exposed_communication",
    "exposed_memcpy_time": "exposed_memcpy",
    "busy_time": "busy",
    "idle_time": "idle",
    "total_time": "total",
}


def _no_correlation(b: TraceBuilder, ev: dict) -> None:
    """Strip the correlation id (and its flow end) from a GPU op, as MTIA writes dma_request events."""
    corr = ev["args"].pop("correlation")
    b.events[:] = [e for e in b.events if not (e.get("cat") == "ac2g" and e.get("id") == corr)]


def mixed_trace(tmp_path):
    """One device: computation, NCCL, a memcpy, a memset, a no-correlation DMA kernel and an orphan.

    Times are ns from the origin. Stream 7: kernel A [0, 100k), kernel B [280k, 320k),
    memset S [400k, 410k); stream 20: NCCL kernel C [50k, 250k); stream 21: memcpy
    M [200k, 300k); dma_request D [500k, 510k) with no correlation; orphan kernel O
    [-50k, -10k) whose launch predates the trace.
    """
    b = TraceBuilder()
    op = b.cpu_op("aten::mm", -200_000, 150_000)
    for i, (api, t) in enumerate([("cudaLaunchKernel", -190_000), ("cudaLaunchKernel", -180_000)]):
        corr = b.launch(api, t, 5_000, external_id=op)
        if i == 0:
            b.kernel("ampere_bf16_gemm_A", 0, 100_000, corr, external_id=op)
        else:
            b.kernel("ampere_bf16_gemm_B", 280_000, 40_000, corr, external_id=op)
    corr = b.launch("cudaLaunchKernel", -170_000, 5_000)
    b.kernel(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 50_000, 200_000, corr, stream=20
    )
    corr = b.launch("cudaMemcpyAsync", -160_000, 5_000)
    b.memcpy("Memcpy DtoD (Device -> Device)", 200_000, 100_000, corr, bytes=1 << 20, stream=21)
    corr = b.launch("cudaMemsetAsync", -150_000, 5_000)
    b.memset(400_000, 10_000, corr, bytes=4096)
    _no_correlation(b, b.kernel("dma_request", 500_000, 10_000, 0))
    b.orphan_kernel("ampere_bf16_gemm_O", -50_000, 40_000)
    b.finish()
    path = tmp_path / "mixed.json.gz"
    b.write(path)
    return tracekit.load(path)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    return mixed_trace(tmp_path_factory.mktemp("mixed"))


def _breakdown(trace, **params) -> dict:
    df = trace.query("gpu_breakdown", **params)
    return {r["category"]: r["time_ns"] for r in df.iter_rows(named=True)}


def test_gpu_breakdown_by_construction(mixed):
    got = _breakdown(mixed)
    # computation: A + B + S + D (the no-correlation op counts); communication: C;
    # exposed communication: C less A = [100k, 250k); exposed memcpy: M less C and B = [250k, 280k);
    # busy: [0, 320k) + S + D; total: 0 to D's end.
    assert got == {
        "computation": 100_000 + 40_000 + 10_000 + 10_000,
        "communication": 200_000,
        "memcpy": 100_000,
        "exposed_communication": 150_000,
        "exposed_memcpy": 30_000,
        "busy": 340_000,
        "idle": 510_000 - 340_000,
        "total": 510_000,
    }
    assert got["computation"] + got["exposed_communication"] + got["exposed_memcpy"] + got["idle"] == got["total"]


def test_gpu_breakdown_include_orphans_adds_the_orphan(mixed):
    got = _breakdown(mixed, include_orphans=True)
    assert got["computation"] == 160_000 + 40_000
    assert got["busy"] == 340_000 + 40_000
    assert got["total"] == 510_000 + 50_000


def test_comm_overlap_by_construction(mixed):
    (row,) = mixed.query("comm_overlap").iter_rows(named=True)
    # Only kernels compute here (not the memset, not the DMA op): C overlaps A on [50k, 100k).
    assert (row["comm_ns"], row["overlapped_ns"], row["overlap_pct"]) == (200_000, 50_000, 25.0)


def test_orphan_causes_tell_before_trace_from_no_correlation(mixed):
    rows = mixed.rows("SELECT name, orphan, orphan_cause FROM gpu_ops WHERE launch_id IS NULL ORDER BY name")
    assert rows == [("ampere_bf16_gemm_O", True, "launched_before_trace"), ("dma_request", False, "no_correlation")]
    timeline = mixed.query("gpu_timeline").row(0, named=True)
    assert (timeline["orphan_gpu_ops"], timeline["counted_gpu_ops"], timeline["busy_ns"]) == (1, 6, 340_000)


def test_orphans_same_before_and_after_the_link(tmp_path):
    # By construction: one orphan (ampere_bf16_gemm_O, 40 us); the DMA op without a correlation is not one.
    mixed_trace(tmp_path).close()
    fresh = tracekit.load(tmp_path / "mixed.json.gz")
    assert not fresh.linked
    assert fresh.orphans() == (1, 40_000)  # the base view over events
    fresh.link()
    assert fresh.linked
    assert fresh.orphans() == (1, 40_000)  # gpu_ops
    fresh.close()


@pytest.mark.parametrize("name", BERT)
def test_gpu_breakdown_equals_tracelens(name, shared_dir):
    expected_dir = shared_dir / "tracelens" / f"{name}.expected"
    with open(expected_dir / "gpu_timeline.csv", newline="") as fh:
        expected = {TIMELINE[r["type"]]: float(r["time ms"]) * 1e6 for r in csv.DictReader(fh)}
    got = _breakdown(tracekit.load(shared_dir / "tracelens" / f"{name}.json.gz"))
    assert set(got) == set(expected)
    for category, ns in expected.items():
        assert abs(got[category] - ns) < 10, (category, got[category], ns)


def test_commands_say_which_gpu_ops_they_leave_out(tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import cli

    b = TraceBuilder()
    corr = b.launch("cudaLaunchKernel", 0, 5_000)
    b.kernel("k_linked", 10_000, 2_000, corr)
    b.orphan_kernel("k_orphan", -20_000, 1_500)
    b.finish()
    path = tmp_path / "t.json.gz"
    b.write(path)
    note = "Note: left out 1 GPU op(s) launched before the trace (0.002 ms); -p include_orphans=true counts them."
    result = CliRunner().invoke(cli, ["query", "gpu_breakdown", str(path), "-f", "csv"])
    assert result.exit_code == 0 and result.stderr.strip() == note
    assert "k_orphan" not in result.stdout
    result = CliRunner().invoke(cli, ["query", "gpu_breakdown", str(path), "-f", "csv", "-p", "include_orphans=true"])
    assert result.exit_code == 0 and result.stderr == ""


@pytest.mark.parametrize("name", BERT)
def test_gemm_calls_equal_tracelens_gemm_sheet(name, shared_dir):
    with open(shared_dir / "tracelens" / f"{name}.expected" / "GEMM.csv", newline="", encoding="utf-8") as fh:
        sheet = list(csv.DictReader(fh))
    got = {
        (r["op"], r["m"], r["n"], r["k"]): r
        for r in tracekit.load(shared_dir / "tracelens" / f"{name}.json.gz").query("gemm_calls").iter_rows(named=True)
    }
    assert len(got) == len(sheet)
    for row in sheet:
        mine = got[(row["name"], int(row["param: M"]), int(row["param: N"]), int(row["param: K"]))]
        assert mine["batch"] == int(row["param: B"])
        assert mine["calls"] == int(row["name_count"])
        # TraceLens writes GFLOPs and MiB as floats: the exact integers round-trip.
        assert mine["flops_per_call"] == round(float(row["GFLOPS_first"]) * 1e9)
        assert mine["bytes_per_call"] == round(float(row["Data Moved (MB)_first"]) * (1 << 20))
        assert abs(mine["kernel_ns"] - float(row["Kernel Time (µs)_sum"]) * 1e3) < 10


def test_gemm_calls_by_construction(tmp_path):
    """A linear over an addmm (counted once, as the addmm), a bmm, and the roofline of an A100."""
    b = TraceBuilder()
    bf = "c10::BFloat16"
    lin = b.cpu_op("aten::linear", 0, 50_000, args={"Input Dims": [[4, 8, 64], [32, 64], [32]]})
    add = b.cpu_op(
        "aten::addmm",
        1_000,
        40_000,
        args={"Input Dims": [[32], [32, 64], [64, 32], [], []], "Input type": ["", bf, bf]},
    )
    corr = b.launch("cudaLaunchKernel", 2_000, 3_000, external_id=add)
    b.kernel("ampere_bf16_s16816gemm", 10_000, 4_000, corr, external_id=add)
    del lin
    bmm = b.cpu_op("aten::bmm", 60_000, 20_000, args={"Input Dims": [[3, 16, 8], [3, 8, 4]], "Input type": [bf, bf]})
    corr = b.launch("cudaLaunchKernel", 61_000, 3_000, external_id=bmm)
    b.kernel("ampere_bf16_s16816gemm_batched", 70_000, 2_000, corr, external_id=bmm)
    b.finish()
    path = tmp_path / "gemm.json.gz"
    b.write(path)
    rows = {r["op"]: r for r in tracekit.load(path).query("gemm_calls").iter_rows(named=True)}
    assert set(rows) == {"aten::addmm", "aten::bmm"}
    mm = rows["aten::addmm"]
    assert (mm["batch"], mm["m"], mm["n"], mm["k"], mm["calls"], mm["kernel_ns"]) == (1, 32, 32, 64, 1, 4_000)
    assert mm["flops_per_call"] == 2 * 32 * 32 * 64 + 32 * 32
    assert mm["bytes_per_call"] == 2 * (32 * 64 + 64 * 32 + 32 * 32 + 32)
    assert mm["tflops_per_s"] == pytest.approx(mm["flops_per_call"] / 4_000 / 1e3)
    bm = rows["aten::bmm"]
    assert (bm["batch"], bm["m"], bm["n"], bm["k"]) == (3, 16, 4, 8)
    assert bm["flops_per_call"] == 3 * 2 * 16 * 4 * 8
    assert bm["bytes_per_call"] == 3 * 2 * (16 * 8 + 8 * 4 + 16 * 4)
    # The builder's device is an A100-SXM4-80GB: bf16 312 TFLOP/s, 2.039 TB/s; these tiny GEMMs are memory-bound.
    assert (mm["roofline_device"], mm["peak_tflops"], mm["peak_tbps"], mm["bound"]) == (
        "A100 80GB",
        312,
        2.039,
        "memory",
    )
    intensity = mm["flops_per_call"] / mm["bytes_per_call"]
    assert mm["roofline_pct"] == pytest.approx(100 * mm["tflops_per_s"] / (intensity * 2.039))


def test_idle_launch_and_queue_by_construction(tmp_path):
    """Stream 7: four kernels whose gaps are host wait, kernel wait and other, one each."""
    b = TraceBuilder()
    # (launch start, kernel start, kernel end), ns
    layout = [(-5_000, 0, 10_000), (20_000, 25_000, 30_000), (21_000, 30_020, 31_000), (22_000, 70_000, 71_000)]
    for i, (launch, start, end) in enumerate(layout):
        corr = b.launch("cudaLaunchKernel", launch, 500)
        b.kernel(f"k{i}", start, end - start, corr)
    b.finish()
    path = tmp_path / "idle.json.gz"
    b.write(path)
    trace = tracekit.load(path)
    (idle,) = trace.query("idle_breakdown").iter_rows(named=True)
    # k1 launched at 20k after k0 ended at 10k: host wait 15k; k2's 20 ns gap: kernel wait (under
    # 30 us, HTA's default); k3 launched before k2 ended, 39 us gap: other.
    assert (idle["idle_ns"], idle["host_wait_ns"], idle["kernel_wait_ns"], idle["other_ns"]) == (
        15_000 + 20 + 39_000,
        15_000,
        20,
        39_000,
    )
    (strict,) = trace.query("idle_breakdown", consecutive_kernel_delay_ns=10).iter_rows(named=True)
    assert (strict["kernel_wait_ns"], strict["other_ns"]) == (0, 39_020)
    (delay,) = trace.query("launch_delay").iter_rows(named=True)
    assert (delay["gpu_ops"], delay["delay_ns_max"], delay["delay_ns_avg"]) == (
        4,
        48_000,
        (5_000 + 5_000 + 9_020 + 48_000) / 4,
    )
    assert delay["launch_bound_ops"] == 0
    (queue,) = trace.query("queue_length").iter_rows(named=True)
    # Values after each step: 1 0 1 2 3 2 1 0, lasting 15k 10k 1k 1k 8k 1k 40k.
    assert (queue["steps"], queue["min"], queue["max"], queue["mean"]) == (8, 0, 3, 10 / 8)
    assert queue["mean_weighted"] == pytest.approx(84_000 / 76_000)
    assert queue["blocked_ns"] == 0


@pytest.mark.parametrize("name", BERT)
def test_op_summary_equals_tracelens_ops_summary(name, shared_dir):
    with open(shared_dir / "tracelens" / f"{name}.expected" / "ops_summary.csv", newline="", encoding="utf-8") as fh:
        sheet = list(csv.DictReader(fh))
    trace = tracekit.load(shared_dir / "tracelens" / f"{name}.json.gz")
    got = {r["op"]: r for r in trace.query("op_summary").iter_rows(named=True)}
    assert set(got) == {r["name"] for r in sheet}
    for row in sheet:
        assert got[row["name"]]["calls"] == int(row["Count"])
        assert abs(got[row["name"]]["kernel_ns"] - float(row["total_direct_kernel_time_sum"]) * 1e3) < 10
        assert got[row["name"]]["share_pct"] == pytest.approx(float(row["Percentage (%)"]), abs=1e-3)
    categories = trace.query("op_categories")
    assert categories["kernel_ns"].sum() == sum(r["kernel_ns"] for r in got.values())
    assert categories.filter(categories["category"] == "GEMM")["kernel_ns"].item() == got["aten::addmm"]["kernel_ns"]


def _write(b: TraceBuilder, tmp_path, name: str):
    b.finish()
    path = tmp_path / name
    b.write(path)
    return tracekit.load(path)


def test_op_categories_follow_the_rules_and_kernel_names(tmp_path):
    b = TraceBuilder()
    b.op_with_kernels("aten::mm", 0, [("ampere_bf16_gemm", None, 5_000)])
    b.op_with_kernels("aten::layer_norm", 20_000, [("vectorized_layer_norm_kernel", None, 2_000)])
    b.op_with_kernels("aten::copy_", 40_000, [("Memcpy DtoD (Device -> Device)", None, 1_000, {"bytes": 64})])
    b.op_with_kernels("my_ext::fused_thing", 60_000, [("triton_poi_fused_add_0", None, 700)])
    b.op_with_kernels("my_ext::mystery", 80_000, [("mystery_kernel", None, 300)])
    rows = {
        r["op"]: r["category"] for r in _write(b, tmp_path, "cats.json.gz").query("op_summary").iter_rows(named=True)
    }
    # Op rules decide the aten ops; a custom op falls back to its kernel's name, then to other.
    assert rows == {
        "aten::mm": "GEMM",
        "aten::layer_norm": "norm",
        "aten::copy_": "memcpy",
        "my_ext::fused_thing": "elementwise",
        "my_ext::mystery": "other",
    }


def test_module_summary_by_construction(tmp_path):
    """Model_0 [0, 100k) holds Block_0 [10k, 50k) and Block_1 [50k, 90k); Block_0 holds Linear_0."""
    b = TraceBuilder()
    b.python_function("nn.Module: Model_0", 0, 100_000)
    b.python_function("nn.Module: Block_0", 10_000, 40_000)
    b.python_function("nn.Module: Linear_0", 12_000, 10_000)
    b.python_function("nn.Module: Block_1", 50_000, 40_000)
    b.op_with_kernels("aten::mm", 13_000, [("gemm_a", None, 3_000)], pre_ns=500, post_ns=500)  # in Linear_0
    b.op_with_kernels("aten::add", 30_000, [("add_b", None, 1_000)], pre_ns=500, post_ns=500)  # in Block_0 only
    b.op_with_kernels("aten::mul", 60_000, [("mul_c", None, 2_000)], pre_ns=500, post_ns=500)  # in Block_1
    b.op_with_kernels("aten::sum", 95_000, [("sum_d", None, 500)], pre_ns=100, post_ns=100)  # in Model_0 only
    b.op_with_kernels("aten::relu", 150_000, [("relu_e", None, 400)], pre_ns=100, post_ns=100)  # outside all
    trace = _write(b, tmp_path, "modules.json.gz")
    rows = {r["module"]: r for r in trace.query("module_summary").iter_rows(named=True)}
    assert {m: (r["calls"], r["gpu_ops"], r["gpu_ns"], r["self_gpu_ns"]) for m, r in rows.items()} == {
        "Model": (1, 4, 6_500, 500),
        "Block": (2, 3, 6_000, 3_000),
        "Linear": (1, 1, 3_000, 3_000),
    }
    total = 3_000 + 1_000 + 2_000 + 500 + 400
    assert rows["Model"]["share_pct"] == pytest.approx(100 * 6_500 / total)
    inst = {r["instance"]: r["gpu_ns"] for r in trace.query("module_summary", level="instance").iter_rows(named=True)}
    assert inst == {"Model_0": 6_500, "Block_0": 4_000, "Block_1": 2_000, "Linear_0": 3_000}


def test_memory_timeline_by_construction(tmp_path):
    b = TraceBuilder()
    b.op_with_kernels("aten::add", 0, [("add", None, 1_000)])
    for i, (ts, nbytes, alloc) in enumerate([(1_000, 512, 1_512), (2_000, 2_048, 3_560), (3_000, -512, 3_048)]):
        b._add(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": b.pid,
                "tid": b.tid,
                "ts": b.origin_ns + ts,
                "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096 * i, "Bytes": nbytes,
                         "Total Allocated": alloc, "Total Reserved": 8_192},
            }
        )  # fmt: skip
    rows = list(_write(b, tmp_path, "mem.json.gz").query("memory_timeline").iter_rows(named=True))
    assert [(r["device_type"], r["device_id"], r["bytes"], r["running_bytes"], r["allocated_bytes"]) for r in rows] == [
        ("cuda", 0, 512, 512, 1_512),
        ("cuda", 0, 2_048, 2_560, 3_560),
        ("cuda", 0, -512, 2_048, 3_048),
    ]
    assert [r["peak"] for r in rows] == [False, True, False]


def test_serving_steps_and_graph_launches_by_construction(tmp_path):
    b = TraceBuilder()
    b.user_annotation("execute_context_2(300_45000)_generation_0(0)", 0, 50_000)
    b.op_with_kernels("vllm::unified_attention_with_output", 1_000, [("flash_fwd_kernel", None, 8_000)])
    b.op_with_kernels("aten::mm", 20_000, [("gemm", None, 4_000)])
    b.user_annotation("execute_0_context_0(sq0sk0)_generation_8(sq8sk4000)", 100_000, 50_000)
    b.user_annotation("step[DECODE bs=8]", 101_000, 40_000)  # inside the execute range: part of that step
    b.graph_launch(110_000, [("gemm", None, 3_000), ("flash_fwd_kernel", None, 1_000), ("gemm", None, 3_000)])
    b.graph_launch(200_000, [("gemm", None, 3_100), ("flash_fwd_kernel", None, 1_100), ("gemm", None, 2_900)])
    trace = _write(b, tmp_path, "serving.json.gz")
    steps = list(trace.query("serving_steps").iter_rows(named=True))
    got = [
        (s["phase"], s["context_requests"], s["generation_requests"], s["context_tokens"], s["generation_tokens"],
         s["gpu_ops"], s["gpu_ns"])
        for s in steps
    ]  # fmt: skip
    # The second graph launch lies outside every step range: a step of its own (a replay, counts unknown), of
    # unknown phase (flash_fwd_kernel is no decode kernel: docs/serving.md).
    assert got == [
        ("prefill", 2, 0, 300, 0, 2, 12_000),
        ("decode", 0, 8, 0, 8, 3, 7_000),
        ("unknown", None, None, None, None, 3, 7_100),
    ]
    assert [s["kind"] for s in steps] == ["step", "step", "graph_replay"]
    (graph,) = trace.query("graph_launches").iter_rows(named=True)
    # Both launches run the same kernel sequence: one graph, two replays.
    assert (graph["api"], graph["launches"], graph["gpu_ops_per_launch"], graph["kernels"]) == (
        "cudaGraphLaunch",
        2,
        3.0,
        2,
    )
    assert (graph["gpu_ns"], graph["top_kernel"]) == (7_000 + 7_100, "gemm")


def test_conv_calls_by_construction(tmp_path):
    b = TraceBuilder()
    bf = "c10::BFloat16"
    args = {
        "Input Dims": [[2, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], [], [], []],
        "Input type": [bf, bf, bf, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
        "Concrete Inputs": ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
    }
    conv = b.op_with_kernels("aten::convolution", 0, [("implicit_convolve_sgemm", None, 10_000)], args=args)
    del conv
    (row,) = _write(b, tmp_path, "conv.json.gz").query("conv_calls").iter_rows(named=True)
    # Output 16 x 16 (stride 2, padding 1, 3x3): 2 * N * Cout * 16*16 * Cin * 3*3 FLOPs.
    assert row["flops_per_call"] == 2 * 2 * 16 * 16 * 16 * 3 * 9
    assert row["bytes_per_call"] == 2 * (2 * 3 * 32 * 32 + 16 * 3 * 9 + 2 * 16 * 16 * 16 + 16)
    assert (row["calls"], row["kernel_ns"], row["stride"], row["bias"]) == (1, 10_000, "[2, 2]", True)


def test_findings_rank_by_the_time_they_explain(tmp_path):
    from tracekit.analysis import findings

    b = TraceBuilder()
    for i in range(4):  # launch-bound: each kernel launched after the previous one ended
        b.op_with_kernels("aten::mm", i * 100_000, [("ampere_sgemm_128x64_nn", None, 20_000)])
    trace = _write(b, tmp_path, "ranked.json.gz")
    found = findings.run(trace)
    ids = [f.id for f in found]
    # By tier (fix, then time), then by the time explained: FP32 SGEMM is a fix; launch-bound before one kernel.
    assert ids.index("fp32_simt_gemm") < ids.index("launch_bound") < ids.index("dominant_kernel")
    for tier in findings.TIERS:
        explained = [f.explains_ns for f in found if f.explains_ns is not None and f.tier == tier]
        assert explained == sorted(explained, reverse=True)
    # By construction: kernels of 20 us at 0, 100, 200, 300 us -> span 320 us, 240 us idle, 80 us busy, and
    # every gap is host wait: launch_bound tells that time, so gpu_idle (the same 240 us) must not fire too.
    by_id = {f.id: f for f in found}
    assert "gpu_idle" not in by_id
    assert (by_id["launch_bound"].explains_ns, by_id["launch_bound"].explains_pct) == (240_000, pytest.approx(75.0))
    assert (by_id["dominant_kernel"].explains_ns, by_id["dominant_kernel"].explains_pct) == (
        80_000,
        pytest.approx(25.0),
    )
    # A finding explaining under 1 % of the span is left out of the report unless asked for.
    tiny = findings.Finding("x", "q", "t", "warning", "T", "m", [], explains_ns=1, explains_pct=0.01)
    assert not tiny.shown and findings.Finding("y", "q", "t", "info", "T", "m", []).shown


def test_range_counters_of_a_cupti_range_profiler_trace(tmp_path):
    """Kineto's range-profiler output: no kernel events, one cuda_profiler_range per kernel with its counters."""
    b = TraceBuilder()
    b.cpu_op("aten::mm", 0, 20_000)
    b.runtime_call("cudaLaunchKernel", 1_000, 3_000)
    b.cpu_op("aten::relu", 30_000, 20_000)
    b.runtime_call("cudaLaunchKernel", 31_000, 3_000)
    counters = [
        {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 100.0,
         "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 7.0,
         "dram__bytes_read.sum": 64.0, "dram__bytes_write.sum": 32.0},
        {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 0.0, "dram__bytes_read.sum": 8.0,
         "dram__bytes_write.sum": 8.0},
    ]  # fmt: skip
    for i, (name, args) in enumerate(zip(["sgemm_kernel", "relu_kernel"], counters)):
        b._add(
            {
                "ph": "X", "cat": "cuda_profiler_range", "name": name, "pid": 0, "tid": 0,
                "ts": b.origin_ns + i * 50_000, "dur": 50_000, "args": args,
            }
        )  # fmt: skip
    trace = _write(b, tmp_path, "ranges.json.gz")
    assert trace.rows("SELECT count(*) FROM gpu_ops")[0][0] == 0
    rows = [
        (r["range_index"], r["name"], r["cpu_op_name"], r["flops"], r["dram_bytes"])
        for r in trace.query("range_counters").iter_rows(named=True)
    ]
    # FMA counts twice; the n-th range is the n-th kernel launch.
    assert rows == [(1, "sgemm_kernel", "aten::mm", 207.0, 96.0), (2, "relu_kernel", "aten::relu", 0.0, 16.0)]
