"""The critical path and its what-ifs on synthetic regions whose answer is known by construction.

One synthetic trace holds five record_function regions, each a scenario (times in ns):

- ``serial``: three ops queue a GEMM (100 us), a flash attention kernel (200 us) and an add (50 us) on one
  stream; the GPU is the bottleneck, so halving attention saves exactly 100 us.
- ``overlap``: a 500 us GEMM on stream 7 and a 100 us flash kernel on stream 8 run side by side: attention is
  on no path, and speeding it up saves nothing (a subtraction would claim 50 us).
- ``hostbound``: tiny kernels between long CPU ops and a trailing CPU-only op: making every kernel free saves
  nothing.
- ``wait``: a kernel on stream 8 waits (cudaStreamWaitEvent) for a 300 us GEMM on stream 7: the path runs
  GEMM -> sync -> kernel, and halving the GEMM saves 150 us.
- ``hostsync``: the CPU waits in cudaDeviceSynchronize for a 400 us GEMM, then copies: the path runs through
  the GEMM and a sync edge; halving the GEMM saves 200 us.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic import TraceBuilder

import tracekit
from tracekit.model.critical_path import longest_path

GEMM = "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
FLASH = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, cutlass::bfloat16_t>>"
)
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >"
US = 1_000


def _build() -> TraceBuilder:
    b = TraceBuilder()
    # serial
    t0 = 0
    b.user_annotation("serial", t0, 45 * US)
    b.op_with_kernels("aten::mm", t0 + 1 * US, [(GEMM, None, 100 * US)])
    b.op_with_kernels("aten::_flash_attention_forward", t0 + 14 * US, [(FLASH, None, 200 * US)])
    b.op_with_kernels("aten::add", t0 + 28 * US, [(ADD, None, 50 * US)])
    # overlap
    t0 = 1_000 * US
    b.user_annotation("overlap", t0, 40 * US)
    b.op_with_kernels("aten::mm", t0 + 1 * US, [(GEMM, None, 500 * US, {"stream": 7})])
    b.op_with_kernels("aten::_flash_attention_forward", t0 + 14 * US, [(FLASH, None, 100 * US, {"stream": 8})])
    # hostbound
    t0 = 2_000 * US
    b.user_annotation("hostbound", t0, 400 * US)
    t = t0 + 1 * US
    for _ in range(4):
        t = b.op_with_kernels("aten::add", t, [(ADD, None, 3 * US)], post_ns=40 * US).end_ns + 5 * US
    b.cpu_op("aten::item", t, 100 * US)
    # wait: B on stream 8 waits for A on stream 7 through an event
    t0 = 3_000 * US
    b.user_annotation("wait", t0, 60 * US)
    a = b.op_with_kernels("aten::mm", t0 + 1 * US, [(GEMM, None, 300 * US, {"stream": 7})])
    a_end = a.gpu[0]["ts_ns"] + a.gpu[0]["dur_ns"]
    record = b.runtime_call("cudaEventRecord", t0 + 14 * US, 2 * US)
    wait = b.runtime_call("cudaStreamWaitEvent", t0 + 17 * US, 2 * US)
    b.cuda_sync("Stream Wait Event", t0 + 20 * US, 1, wait, stream=8, wait_on_stream=7, wait_event_corr=record)
    b.op_with_kernels("aten::add", t0 + 22 * US, [(ADD, a_end + 2 * US, 20 * US, {"stream": 8})])
    # hostsync: the CPU waits for K, then copies
    t0 = 4_000 * US
    b.user_annotation("hostsync", t0, 500 * US)
    k = b.op_with_kernels("aten::mm", t0 + 1 * US, [(GEMM, None, 400 * US, {"stream": 7})])
    k_end = k.gpu[0]["ts_ns"] + k.gpu[0]["dur_ns"]
    sync_start = t0 + 14 * US
    sync = b.runtime_call("cudaDeviceSynchronize", sync_start, k_end + 3 * US - sync_start)
    b.cuda_sync("Context Sync", k_end, 1 * US, sync)
    b.cpu_op("aten::copy_", k_end + 8 * US, 10 * US)
    b.finish()
    return b


@pytest.fixture(scope="module")
def regions(inputs):
    return inputs.trace(inputs.file(_build(), "critical_path_regions.json.gz"))


def _path(trace, region):
    return trace.query("critical_path", region=region).pl()


def _whatif(trace, region, **kw):
    return trace.query("critical_path_whatif", region=region, **kw).pl().row(0, named=True)


def test_longest_path_solver_takes_the_heavier_branch_and_reports_cycles():
    # 0 -> 1 -> 3 (1 + 1) against 0 -> 2 -> 3 (5 + 0): the second is longer.
    assert longest_path([0, 1, 0, 2], [1, 3, 2, 3], [1, 1, 5, 0]) == [2, 3]
    assert longest_path([], [], []) == []
    assert longest_path([0, 1], [1, 0], [1, 1]) is None


def test_serial_chain_path_is_the_gpu_queue_and_halving_attention_saves_its_half(regions):
    path = _path(regions, "serial")
    kinds = path["kind"].to_list()
    assert kinds[-5:] == ["kernel", "kernel_gap", "kernel", "kernel_gap", "kernel"]
    assert "launch_delay" in kinds
    assert path.filter(path["kind"] == "kernel")["stage"].to_list()[1] == "fused_attention"
    w = _whatif(regions, "serial", stage="fused_attention", factor=0.5)
    assert w["scaled_edges"] == 1 and w["scaled_ns"] == 200 * US
    assert w["saved_ns"] == 100 * US
    assert w["new_span_ns"] == w["span_ns"] - 100 * US
    assert w["path_ns"] <= w["span_ns"]


def test_overlapped_attention_is_off_the_path_and_its_speedup_saves_nothing(regions):
    path = _path(regions, "overlap")
    assert "fused_attention" not in path["stage"].to_list()
    assert path["kind"].to_list()[-1] == "kernel"
    w = _whatif(regions, "overlap", stage="fused_attention", factor=0.5)
    assert w["scaled_ns"] == 100 * US
    assert w["saved_ns"] == 0 and w["new_span_ns"] == w["span_ns"]
    assert w["naive_span_ns"] == w["span_ns"] - 50 * US  # what a subtraction would have claimed
    stages = regions.query("critical_path_stages", region="overlap").pl()
    attention = stages.filter(stages["stage"] == "fused_attention").row(0, named=True)
    assert attention["path_ns"] == 0
    assert attention["gpu_pct"] == pytest.approx(100 * 100 / 600, abs=0.01)


def test_host_bound_region_gains_nothing_from_free_kernels(regions):
    kinds = set(_path(regions, "hostbound")["kind"])
    assert kinds <= {"cpu", "cpu_gap"}
    w = _whatif(regions, "hostbound", kernel=".", factor=0.0)
    assert w["scaled_edges"] == 4
    assert w["saved_ns"] == 0
    summary = regions.query("critical_path_summary", region="hostbound").pl()
    total = summary.filter(summary["kind"] == "total").row(0, named=True)
    assert total["time_ns"] == w["path_ns"] and total["pct"] == 100.0


def test_cross_stream_wait_puts_the_waited_for_kernel_on_the_path(regions):
    path = _path(regions, "wait")
    assert path["kind"].to_list()[-3:] == ["kernel", "sync", "kernel"]
    gemm, _, add = path.tail(3).rows(named=True)
    assert gemm["time_ns"] == 300 * US and add["time_ns"] == 20 * US
    assert _whatif(regions, "wait", kernel="gemm", factor=0.5)["saved_ns"] == 150 * US


def test_host_sync_waits_for_the_kernel_and_the_path_runs_through_it(regions):
    path = _path(regions, "hostsync")
    kinds = path["kind"].to_list()
    i = kinds.index("sync")
    assert kinds[i - 1] == "kernel" and path["time_ns"][i - 1] == 400 * US
    assert kinds[-1] == "cpu"  # ends with the copy after the sync
    assert _whatif(regions, "hostsync", kernel="gemm", factor=0.5)["saved_ns"] == 200 * US
    # HTA's weights (host gaps 0) make the path shorter, never longer.
    hta = regions.query("critical_path", region="hostsync", host_gaps=False).pl()
    assert hta["time_ns"].sum() <= path["time_ns"].sum()


@pytest.mark.slow  # loads and links a shared trace of its own (2 s)
def test_shared_trace_path_is_no_longer_than_the_step(shared_dir, inputs):
    trace = inputs.trace(shared_dir / "tracelens/h100_bert-small_sdpa-flash.json.gz")
    path = trace.query("critical_path", region="").pl()
    graph = trace.query("critical_path_graph", region="").pl()
    assert path.height > 0
    assert path["time_ns"].sum() <= graph["span_ns"][0]
    assert "cpu" in set(path["kind"])  # a host-bound trace: its path may never reach the GPU
    assert set(path["kind"]) <= {"cpu", "cpu_gap", "launch_delay", "kernel", "communication", "kernel_gap", "sync"}


NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _rank(rank: int, compute_ns: int, after_ns: int) -> TraceBuilder:
    """One rank of a two-rank job: a GEMM of ``compute_ns``, an all-reduce, then (``after_ns`` > 0) an add."""
    b = TraceBuilder(distributed_info={"rank": rank, "world_size": 2, "backend": "nccl"}, trace_name=f"rank{rank}")
    b.profiler_step(1, 0, 100 * US)
    gemm = b.op_with_kernels("aten::mm", 1 * US, [(GEMM, None, compute_ns)])
    gemm_end = gemm.gpu[0]["ts_ns"] + gemm.gpu[0]["dur_ns"]
    # Both ranks' all-reduce kernels end together, 50 us after the late rank (rank 1) got there.
    end = max(gemm_end, 1 * US + 15 * US + 400 * US + 1_536) + 50 * US
    start = gemm_end + 1_536
    b.op_with_kernels("nccl:all_reduce", 20 * US, [(NCCL, start, end - start)])
    if after_ns:
        b.op_with_kernels("aten::add", 40 * US, [(ADD, None, after_ns)])
    for ev in b.events:
        if ev["name"] == NCCL and ev.get("cat") == "kernel":
            ev["args"].update(
                {
                    "Collective name": "allreduce",
                    "Process Group Name": "0",
                    "Process Group Ranks": "[0, 1]",
                    "Group size": 2,
                    "Seq": 1,
                }
            )
    b.finish()
    return b


@pytest.fixture(scope="module")
def job(inputs):
    # Rank 1 computes 400 us, rank 0 100 us: rank 0 waits about 300 us in the all-reduce, then adds for 30 us.
    folder = inputs.folder(
        {"rank0.json.gz": _rank(0, 100 * US, 30 * US), "rank1.json.gz": _rank(1, 400 * US, 0)}, "critical_path_job"
    )
    return inputs.trace(folder)


def test_cross_rank_path_runs_through_the_late_rank_and_names_it(job):
    path = job.query("critical_path", cross_rank=True).pl()
    rows = path.rows(named=True)
    kinds = [r["kind"] for r in rows]
    assert "collective" in kinds
    i = kinds.index("collective")
    # the late rank's GEMM, then the wait it caused, then rank 0's add after the all-reduce
    assert rows[i]["rank"] == 1 and 50 * US < rows[i]["time_ns"] < 60 * US  # the transfer: rank 1's kernel
    gemms = [r for r in rows if r["kind"] == "kernel" and r["time_ns"] == 400 * US]
    assert gemms and gemms[0]["rank"] == 1
    assert rows[-1]["rank"] == 0 and rows[-1]["time_ns"] == 30 * US
    ranks = job.query("critical_path_ranks").pl()
    assert ranks["rank"][0] == 1  # holds most of the path
    late = ranks.filter(ranks["rank"] == 1).row(0, named=True)
    assert late["last_arrivals"] == 1 and late["wait_caused_ns"] > 250 * US
    # Each rank alone: rank 0's path counts its all-reduce whole, the wait included.
    alone = job.query("critical_path").pl()
    assert "collective" not in set(alone["kind"])
    # Every GEMM at half speed: the job saves rank 1's 200 us (rank 0's 50 us lay off the path).
    w = job.query("critical_path_whatif", cross_rank=True, kernel="gemm", factor=0.5).pl().row(0, named=True)
    assert w["saved_ns"] == 200 * US


def test_perfetto_export_marks_the_path_on_a_thread_per_process(regions, tmp_path):
    import json

    from tracekit.present import export

    out = tmp_path / "serial.json"
    done = export.export_perfetto(regions, out, critical_path=("serial", 0))
    events = json.loads(out.read_text())["traceEvents"]
    marked = [e for e in events if e.get("cat") == export.PATH_CAT]
    path = _path(regions, "serial")
    assert done.path_events == len(marked) == path.filter(path["time_ns"] > 0).height
    assert sum(e["args"]["time_ns"] for e in marked) == path["time_ns"].sum()
    gpu = [e for e in marked if e["name"] == "kernel"]
    assert [e["dur"] for e in gpu] == [100.0, 200.0, 50.0] and {e["pid"] for e in gpu} == {0}
    assert export.region_instance("ProfilerStep:3") == ("ProfilerStep", 3)
    assert export.region_instance("attn_fwd") == ("attn_fwd", 0)


def test_solver_function_registers_twice_on_one_connection():
    import duckdb

    from tracekit.model import critical_path

    con = duckdb.connect()
    critical_path.register(con)
    critical_path.register(con)  # a connection given to two Trace objects
    assert con.sql("SELECT critical_path_solve([1, 2], [2, 3], [5, 6])").fetchall() == [([1, 2],)]


def test_report_says_each_stages_share_of_the_path_beside_its_gpu_share(tmp_path):
    """``tracekit report --critical-path``: each trace's critical_path_stages rows in the JSON and a line per
    trace in the terminal (the naive sample: the mask holds the most of the path and of GPU time); without the
    flag the report solves no graph."""
    import json

    from click.testing import CliRunner

    from tracekit.cli import cli

    sample = Path(__file__).resolve().parent.parent / "sample_traces" / "gpu_h200" / "naive.json.gz"
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        cli, ["report", str(sample), "--critical-path", "--json", str(out)], env={"COLUMNS": "100"}
    )
    assert res.exit_code == 0, res.output
    (trace,) = json.loads(out.read_text())["traces"]
    want = tracekit.load(sample).query("critical_path_stages").to_dicts()
    assert trace["critical_path"] == json.loads(json.dumps(want)) and want
    assert abs(sum(r["path_pct"] for r in want) - 100) < 0.01
    assert max(want, key=lambda r: r["path_ns"])["stage"] == "mask"
    res = CliRunner().invoke(cli, ["report", str(sample), "--critical-path"], env={"COLUMNS": "100"})
    assert "On the critical path" in res.output and "naive: mask " in res.output
    res = CliRunner().invoke(cli, ["report", str(sample), "--json", str(out)])
    assert json.loads(out.read_text())["traces"][0]["critical_path"] == []
