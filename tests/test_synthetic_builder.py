"""Tests of the synthetic trace builder itself (stdlib + pytest only).

Every check reads the WRITTEN trace back (json with exact Decimal times) and
recounts it with code written here, or compares against values worked out by
hand, so a builder that writes one thing and claims another fails.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import synthetic as syn  # noqa: E402

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


def load(text: str) -> dict:
    return json.loads(text, parse_float=Decimal)


def ns(us_value) -> int:
    """Exact µs (Decimal from the file) -> integer ns."""
    value = Decimal(us_value) * 1000
    assert value == value.to_integral_value(), us_value
    return int(value)


def union(intervals) -> int:
    covered, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s >= end:
            covered += e - s
            end = e
        elif e > end:
            covered += e - end
            end = e
    return covered


def small_trace(legacy: bool = False, origin_ns: int = syn.DEFAULT_ORIGIN_NS) -> syn.TraceBuilder:
    """A hand-made trace whose answers are worked out below (relative ns):

    GPU ops: orphan [0, 4000) s7; gemm_a [30000, 40000) s7; a copy [35000, 45000)
    s9; graph kernels g1 [50000, 52000), g2 [52000, 53500) s7; a memset
    [60000, 61000) s7. busy = 4000 + 15000 + 3500 + 1000 = 23500; linked busy =
    19500; span = 61000.
    """
    b = syn.TraceBuilder(legacy=legacy, origin_ns=origin_ns)
    b.orphan_kernel("orphan_k", 0, 4_000)
    step = b.profiler_step(1, 10_000, None)
    b.python_function("train.py(10): <module>", 10_500, 80_000)
    b.op_with_kernels(
        "aten::mm",
        12_000,
        [
            ("gemm_a", 30_000, 10_000, {"grid": (8, 16, 5), "registers_per_thread": 122}),
            ("Memcpy DtoD (Device -> Device)", 35_000, 10_000, {"bytes": 1 << 20, "stream": 9}),
        ],
        children=("aten::empty",),
    )
    b.graph_launch(47_000, [("g1", 50_000, 2_000), ("g2", 52_000, 1_500)], external_id=step)
    corr = b.launch("cudaMemsetAsync", 56_000, 3_000, external_id=step)
    b.memset(60_000, 1_000, corr, bytes=512, external_id=step)
    sync = b.runtime_call("cudaDeviceSynchronize", 70_000, 9_000)
    if not legacy:
        b.cuda_sync("Context Sync", 70_500, 8_000, sync)
        b.gpu_user_annotation("ProfilerStep#1", 30_000, 31_000, step)
    b.close(step, 90_000)
    b.finish()
    return b


BUSY, BUSY_LINKED, SPAN = 23_500, 19_500, 61_000


@pytest.fixture(params=[False, True], ids=["modern", "legacy"])
def written(request, tmp_path):
    b = small_trace(legacy=request.param)
    path = tmp_path / "t.json.gz"
    b.write(path)
    return b, load(gzip.open(path, "rt").read())


# ---- file format ------------------------------------------------------------


def test_written_files_parse_and_equal_to_dict(tmp_path):
    b = small_trace()
    for name in ("t.json", "t.json.gz"):
        b.write(tmp_path / name)
    plain = json.loads((tmp_path / "t.json").read_text())
    assert plain == json.loads(gzip.open(tmp_path / "t.json.gz", "rt").read()) == b.to_dict()
    assert gzip.open(tmp_path / "t.json.gz").read(1) == b"{"  # really gzip-compressed, not plain
    # Kineto's key layout: metadata, then traceEvents, then the trailer keys.
    assert list(plain) == [
        "schemaVersion",
        "deviceProperties",
        "traceEvents",
        "traceName",
        "displayTimeUnit",
        "baseTimeNanoseconds",
    ]
    dev = plain["deviceProperties"][0]
    assert (dev["name"], dev["numSms"], dev["regsPerMultiprocessor"], dev["computeMajor"]) == (
        "NVIDIA A100-SXM4-80GB",
        108,
        65536,
        8,
    )


def test_ts_and_dur_have_exactly_three_decimals():
    b = small_trace()
    text = b.dumps()
    values = re.findall(r'"(?:ts|dur)": ([^,\n}]*)', text)
    expected = sum(("ts" in e) + ("dur" in e) for e in b.to_dict()["traceEvents"])
    assert len(values) == expected > 0
    bad = [v for v in values if not re.fullmatch(r"\d+\.\d{3}", v)]
    assert not bad
    assert '"dur": 10.000' in text  # whole µs still carry three zeros, as Kineto prints them


def test_epoch_scale_timestamps_keep_nanoseconds():
    origin = 1_712_867_402_348_256_123  # epoch ns: beyond a float64's integer range in ns
    text = small_trace(origin_ns=origin).dumps()
    assert '"ts": 1712867402348256.123' in text  # the orphan kernel at relative 0
    events = load(text)["traceEvents"]
    orphan = next(e for e in events if e.get("name") == "orphan_k" and e["ph"] == "X")
    assert ns(orphan["ts"]) == origin
    assert float(orphan["ts"]) * 1000 != origin  # why the file, not to_dict(), is the exact form


def test_kineto_event_shapes():
    b = small_trace()
    events = load(b.dumps())["traceEvents"]
    kernel = next(e for e in events if e.get("cat") == "kernel" and e["name"] == "gemm_a")
    assert list(kernel) == ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
    assert list(kernel["args"]) == [
        "External id",
        "queued",
        "device",
        "context",
        "stream",
        "correlation",
        "registers per thread",
        "shared memory",
        "blocks per SM",
        "warps per SM",
        "grid",
        "block",
        "est. achieved occupancy %",
    ]
    assert kernel["args"]["blocks per SM"] == Decimal("5.925926")  # 640 blocks / 108 SMs, %f
    op = next(e for e in events if e.get("name") == "aten::mm")
    assert list(op["args"]) == ["External id", "Record function id", "Ev Idx"]
    memcpy = next(e for e in events if e.get("cat") == "gpu_memcpy")
    assert (memcpy["pid"], memcpy["tid"]) == (0, 9)
    assert memcpy["args"]["memory bandwidth (GB/s)"] == Decimal(1 << 20) / 10_000
    py = next(e for e in events if e.get("cat") == "python_function")
    assert list(py["args"]) == ["Python parent id", "Python id", "Ev Idx"]
    span = next(e for e in events if e.get("cat") == "Trace")
    assert (span["pid"], span["tid"], span["name"]) == ("Spans", "PyTorch Profiler", "PyTorch Profiler (0)")
    instants = {e["name"]: e for e in events if e["ph"] == "i"}
    assert instants["Iteration Start: PyTorch Profiler"]["pid"] == "Traces"
    assert (instants["Record Window End"]["pid"], instants["Record Window End"]["tid"]) == ("", "")
    assert instants["Iteration Start: PyTorch Profiler"]["ts"] == span["ts"]
    meta = {(e["name"], e["pid"], e["tid"]) for e in events if e["ph"] == "M"}
    assert {
        ("process_labels", 0, 0),
        ("thread_name", 0, 7),
        ("thread_name", 0, 9),
        ("thread_name", b.pid, b.pid),
    } <= meta
    sync = next(e for e in events if e.get("cat") == "cuda_sync")
    assert (sync["pid"], sync["tid"], sync["args"]["cuda_sync_kind"]) == (0, -1, "Context Sync")


# ---- flows, correlation, nesting ------------------------------------------


def test_each_flow_start_sits_on_its_launch(written):
    _, trace = written
    events = trace["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in LAUNCH_CATS}
    starts = [e for e in events if e["ph"] == "s"]
    assert len(starts) == 4  # two in aten::mm, the graph launch, the memset (not the sync)
    for s in starts:
        launch = launches[s["id"]]
        assert (s["ts"], s["pid"], str(s["tid"])) == (launch["ts"], launch["pid"], str(launch["tid"]))


def test_each_gpu_op_has_a_flow_end_on_its_stream(written):
    _, trace = written
    events = trace["traceEvents"]
    ends = Counter((e["id"], e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "f")
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    assert len(gpu) == 6
    for e in gpu:
        assert ends[(e["args"]["correlation"], e["pid"], e["tid"], e["ts"])] == 1
    assert all(e.get("bp") == "e" for e in events if e["ph"] == "f")
    assert sum(ends.values()) == len(gpu)


def test_graph_launch_shares_one_correlation():
    events = load(small_trace().dumps())["traceEvents"]
    graph = [e for e in events if e.get("name") == "cudaGraphLaunch"]
    assert len(graph) == 1 and graph[0]["args"]["cbid"] == 311
    corr = graph[0]["args"]["correlation"]
    kernels = [e for e in events if e.get("cat") == "kernel" and e["args"]["correlation"] == corr]
    assert [k["name"] for k in kernels] == ["g1", "g2"]
    flows = Counter(e["ph"] for e in events if e["ph"] in "sf" and e["id"] == corr)
    assert flows == {"s": 1, "f": 2}


def test_op_with_kernels_nests_launches_and_ids():
    events = load(small_trace().dumps())["traceEvents"]
    op = next(e for e in events if e.get("name") == "aten::mm")
    ext = op["args"]["External id"]
    start, end = ns(op["ts"]), ns(op["ts"]) + ns(op["dur"])
    launches = [e for e in events if e.get("cat") in LAUNCH_CATS and e["args"].get("External id") == ext]
    assert [e["name"] for e in launches] == ["cudaLaunchKernel", "cudaMemcpyAsync"]
    for launch in launches:
        assert start < ns(launch["ts"]) and ns(launch["ts"]) + ns(launch["dur"]) < end
    corrs = [e["args"]["correlation"] for e in launches]
    assert len(set(corrs)) == 2
    gpu = [e for e in events if e.get("cat") in GPU_CATS and e["args"]["correlation"] in corrs]
    assert {e["args"]["External id"] for e in gpu} == {ext}
    empty = next(e for e in events if e.get("name") == "aten::empty")
    assert start < ns(empty["ts"]) and ns(empty["ts"]) + ns(empty["dur"]) < min(ns(e["ts"]) for e in launches)


def test_auto_scheduled_gpu_ops_follow_launch_and_stream_order():
    b = syn.TraceBuilder()
    res = b.op_with_kernels("aten::add", 0, [("k1", None, 50_000), ("k2", None, 1_000)])
    (k1, k2), launches = res.gpu, [e for e in b.events if e.get("cat") == "cuda_runtime"]
    assert k1["ts_ns"] == launches[0]["ts"] - b.origin_ns + 5_200 + syn.LAUNCH_TO_GPU_NS
    assert k2["ts_ns"] == k1["ts_ns"] + 50_000 + syn.GPU_GAP_NS  # queued behind k1 on stream 7
    with pytest.raises(ValueError):
        b.op_with_kernels("aten::add", 200_000, [("early", 100_000, 1_000)])


def test_orphan_kernel_has_no_launch():
    b = small_trace()
    events = load(b.dumps())["traceEvents"]
    runtime = {e["args"]["correlation"] for e in events if e.get("cat") in LAUNCH_CATS}
    orphans = [e for e in events if e.get("cat") in GPU_CATS and e["args"]["correlation"] not in runtime]
    assert [e["name"] for e in orphans] == ["orphan_k"]
    assert "External id" not in orphans[0]["args"]
    assert not any(e["ph"] == "s" and e["id"] == orphans[0]["args"]["correlation"] for e in events)
    assert b.truth["gpu_ops_orphan"] == 1


def test_unclosed_or_inverted_ops_are_refused():
    b = syn.TraceBuilder()
    ext = b.cpu_op("aten::linear", 1_000, None)
    with pytest.raises(RuntimeError):
        b.to_dict()
    with pytest.raises(ValueError):
        b.close(ext, 999)


# ---- truth ------------------------------------------------------------------


def test_truth_equals_a_recount_of_the_written_events(written):
    b, trace = written
    events = trace["traceEvents"]
    truth = b.truth
    assert truth["counts"] == Counter((e["ph"], e.get("cat")) for e in events)
    assert truth["events"] == len(events)
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    runtime = {e["args"]["correlation"] for e in events if e.get("cat") in LAUNCH_CATS}
    linked = [e for e in gpu if e["args"]["correlation"] in runtime]
    assert (
        (truth["gpu_ops"], truth["gpu_ops_linked"], truth["gpu_ops_orphan"])
        == (len(gpu), len(linked), len(gpu) - len(linked))
        == (6, 5, 1)
    )
    per_name = {}
    for e in gpu:
        k = per_name.setdefault(e["name"], {"count": 0, "total_ns": 0})
        k["count"] += 1
        k["total_ns"] += ns(e["dur"])
    assert truth["kernels"] == per_name
    intervals = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in gpu]
    assert truth["busy_ns"] == union(intervals) == BUSY
    assert truth["busy_ns_linked"] == BUSY_LINKED
    assert truth["span_ns"] == SPAN


def test_legacy_schema():
    events = load(small_trace(legacy=True).dumps())["traceEvents"]
    cats = {e.get("cat") for e in events}
    assert cats == {"Operator", "Runtime", "Kernel", "Memcpy", "Memset", "async", "python_function", "Trace", None}
    for e in events:
        if e.get("cat") in {"Runtime", "Kernel", "Memcpy", "Memset"}:
            assert "external id" in e["args"] and "External id" not in e["args"]
        if e.get("cat") in {"Kernel", "Memcpy", "Memset"}:
            assert e["tid"] == f"stream {e['args']['stream']}"
    step = next(e for e in events if e.get("name") == "ProfilerStep#1")
    assert step["cat"] == "Operator" and step["tid"] == str(step["pid"])
    assert {e["name"] for e in events if e.get("cat") == "async"} == {"launch"}
    with pytest.raises(ValueError):
        syn.TraceBuilder(legacy=True).gpu_user_annotation("x", 0, 1, 1)


def test_theoretical_occupancy_matches_the_post():
    flash = syn.theoretical_occupancy(255, 128, 32768)
    assert (flash["blocks_per_sm"], flash["warps_per_sm"], flash["occupancy_pct"]) == (2, 8, 12.5)
    cudnn = syn.theoretical_occupancy(240, 256, 65536)
    assert (cudnn["blocks_per_sm"], cudnn["warps_per_sm"], cudnn["occupancy_pct"]) == (1, 8, 12.5)
    assert syn.theoretical_occupancy(32, 128)["blocks_per_sm"] == 16  # thread-limited: 2048 / 128


# ---- the post's variants ----------------------------------------------------

# Kernels per forward and region GPU time as the post reports them (not from truth).
POST_GPU_OPS = {"naive": 6, "inplace": 5, "math": 20, "efficient": 1, "flash": 1, "cudnn": 1}
POST_GPU_US = {"inplace": 1955.0, "math": 7239.0, "efficient": 277.9, "flash": 146.8, "cudnn": 186.3}


@pytest.fixture(scope="module")
def variants():
    built = syn.post_variants()
    return {n: (v, load(v.builder.dumps())["traceEvents"]) for n, v in built.items()}


def regions_with_gpu_ops(events, region):
    """Per region occurrence, the GPU ops whose launch call lies inside it (by our own walk)."""
    launch_ts = {e["args"]["correlation"]: ns(e["ts"]) for e in events if e.get("cat") in LAUNCH_CATS}
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    out = []
    for r in sorted(
        (e for e in events if e.get("cat") == "user_annotation" and e["name"] == region), key=lambda e: e["ts"]
    ):
        lo, hi = ns(r["ts"]), ns(r["ts"]) + ns(r["dur"])
        out.append((r, [g for g in gpu if lo <= launch_ts.get(g["args"]["correlation"], -1) <= hi]))
    return out


def test_variants_have_the_posts_structure(variants):
    assert set(variants) == set(POST_GPU_OPS)
    for name, (v, events) in variants.items():
        truth = v.truth
        occurrences = regions_with_gpu_ops(events, truth["region"])
        assert len(occurrences) == 3, name
        assert [len(ops) for _, ops in occurrences] == [POST_GPU_OPS[name]] * 3, name
        assert truth["gpu_ops_per_forward"] == POST_GPU_OPS[name]
        region = truth["regions"][truth["region"]]
        assert region["occurrences"] == 3 and region["gpu_ops_per_occurrence"] == POST_GPU_OPS[name]
        assert region["gpu_time_ns"] == [sum(ns(g["dur"]) for g in ops) for _, ops in occurrences]
        assert region["cpu_time_ns"] == [ns(r["dur"]) for r, _ in occurrences]
        steps = sorted(
            e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
        )
        assert steps == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
        assert truth["region"] == ("attn_fwd" if name in ("naive", "inplace") else "sdpa_fwd")
        # the region's first op opens 228 µs late at step 2 (cold start), 5 µs later on
        first_ops = []
        for r, _ in occurrences:
            lo, hi = ns(r["ts"]), ns(r["ts"]) + ns(r["dur"])
            first_ops.append(
                min(ns(e["ts"]) for e in events if e.get("cat") == "cpu_op" and lo < ns(e["ts"]) < hi) - lo
            )
        assert first_ops == region["first_op_gap_ns"] == [228_000, 5_000, 5_000]


def test_variant_gpu_times_match_the_post(variants):
    for name, us_value in POST_GPU_US.items():
        avg = variants[name][0].truth["regions"][variants[name][0].truth["region"]]["gpu_time_avg_ns"]
        assert abs(avg / 1000 - us_value) < 0.05, (name, avg)


def test_variant_kernel_names_and_launches(variants):
    def gpu(name):
        return [e for e in variants[name][1] if e.get("cat") in GPU_CATS]

    def launch_of(name, kernel):
        return next(
            e
            for e in variants[name][1]
            if e.get("cat") in LAUNCH_CATS and e["args"]["correlation"] == kernel["args"]["correlation"]
        )

    copies = [e for e in gpu("naive") if e["name"] == "Memcpy DtoD (Device -> Device)"]
    assert len(copies) == 3 and all(launch_of("naive", c)["name"] == "cudaMemcpyAsync" for c in copies)
    assert not any(e.get("cat") == "gpu_memcpy" for e in variants["inplace"][1])
    assert sum("s16816gemm" in e["name"] for e in gpu("naive")) == 3 * 2 + 1  # + the orphan PV GEMM
    math_names = [e["name"] for e in gpu("math")]
    assert not any("s16816" in n for n in math_names)
    assert sum("sgemm" in n for n in math_names) == 6
    assert sum("triu_tril_kernel" in n for n in math_names) == 3
    assert sum("where_kernel" in n for n in math_names) == 6
    assert sum("CUDAFunctor_add" in n for n in math_names) == 3
    assert any(e.get("name") == "aten::_safe_softmax" for e in variants["math"][1])

    cudnn = [e for e in gpu("cudnn") if e["name"] == syn.CUDNN_KERNEL]
    for k in cudnn[1:]:  # [0] is the orphan
        launch = launch_of("cudnn", k)
        assert (launch["name"], launch["cat"], launch["args"]["cbid"]) == ("cuLaunchKernelEx", "cuda_driver", 652)
    a = cudnn[1]["args"]
    assert (
        a["registers per thread"],
        a["block"],
        a["est. achieved occupancy %"],
        a["blocks per SM"],
        a["warps per SM"],
    ) == (240, [256, 1, 1], 0, 0, 0)
    flash = [e for e in gpu("flash") if "flash_fwd_kernel" in e["name"]]
    a = flash[1]["args"]
    assert (a["registers per thread"], a["block"], a["est. achieved occupancy %"]) == (255, [128, 1, 1], 13)
    assert "fmha_cutlassF_bf16_aligned_64x64_rf_sm80" in gpu("efficient")[1]["name"]


def enclosing(events, ev):
    """Names of the cpu_ops enclosing ``ev`` on its thread, outermost first."""
    lo, hi = ns(ev["ts"]), ns(ev["ts"]) + ns(ev["dur"])
    outer = [
        e
        for e in events
        if e.get("cat") == "cpu_op"
        and e is not ev
        and e["tid"] == ev["tid"]
        and ns(e["ts"]) <= lo
        and hi <= ns(e["ts"]) + ns(e["dur"])
    ]
    return [e["name"] for e in sorted(outer, key=lambda e: (e["ts"], -e["dur"]))]


def test_fused_kernels_sit_under_the_right_op_chain(variants):
    chains = {
        "efficient": [
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_efficient_attention",
            "aten::_efficient_attention_forward",
        ],
        "flash": [
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_flash_attention",
            "aten::_flash_attention_forward",
        ],
        "cudnn": ["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention"],
        "math": [
            "aten::scaled_dot_product_attention",
            "aten::_scaled_dot_product_attention_math",
            "aten::_safe_softmax",
            "aten::_softmax",
        ],
    }
    for name, chain in chains.items():
        events = variants[name][1]
        ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
        kernel = next(
            e
            for e in events
            if e.get("cat") == "kernel"
            and "External id" in e["args"]
            and ops[e["args"]["External id"]]["name"] == chain[-1]
        )
        op = ops[kernel["args"]["External id"]]
        assert enclosing(events, op) + [op["name"]] == chain, name
        sdpa = next(e for e in events if e.get("name") == chain[0])
        assert sdpa["args"]["Input Dims"][:3] == [[8, 16, 1024, 64]] * 3
        assert sdpa["args"]["Input type"][:3] == ["c10::BFloat16"] * 3


def test_variant_truth_per_gpu_op_matches_the_file(variants):
    for name, (v, events) in variants.items():
        by_corr = {}
        for e in events:
            if e.get("cat") in GPU_CATS:
                by_corr.setdefault(e["args"]["correlation"], []).append(e)
        launches = {e["args"]["correlation"]: e["name"] for e in events if e.get("cat") in LAUNCH_CATS}
        for g in v.truth["gpu_ops"]:
            (e,) = by_corr[g["correlation"]]
            assert (e["name"], ns(e["ts"]), ns(e["dur"])) == (g["name"], g["ts_ns"], g["dur_ns"])
            assert launches.get(g["correlation"]) == g["launch_api"]
            assert g["stage"] in syn.STAGES and g["precision"] in syn.PRECISIONS
        assert len(v.truth["gpu_ops"]) == sum(map(len, by_corr.values())) == 3 * POST_GPU_OPS[name] + 1
        orphans = [g for g in v.truth["gpu_ops"] if g["orphan"]]
        assert len(orphans) == v.truth["orphans"] == 1
        assert orphans[0]["ts_ns"] == min(g["ts_ns"] for g in v.truth["gpu_ops"])
        assert orphans[0]["name"] == v.truth["forward"][-1]["name"]
        region = v.truth["regions"][v.truth["region"]]
        assert sum(v.truth["stage_ns"].values()) == sum(region["gpu_time_ns"])
        intervals = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events if e.get("cat") in GPU_CATS]
        assert v.truth["busy_ns"] == union(intervals)
        assert v.truth["span_ns"] == max(e for _, e in intervals) - min(s for s, _ in intervals)


def test_variant_precision_and_stages(variants):
    for v, _ in variants.values():
        for kernel, cls in v.truth["precision"].items():
            if "s16816" in kernel or "wmma" in kernel:
                assert cls == "tensor_core", kernel
            if "sgemm" in kernel:
                assert cls == "fp32_simt", kernel
            if kernel.startswith("Memcpy") or "elementwise_kernel" in kernel:
                assert cls == "other", kernel
    stages = lambda n: [f["stage"] for f in variants[n][0].truth["forward"]]  # noqa: E731
    assert stages("naive") == ["qk_matmul", "scale", "mask", "mask", "softmax", "pv_matmul"]
    assert stages("inplace") == ["qk_matmul", "scale", "mask", "softmax", "pv_matmul"]
    assert Counter(stages("math")) == {"mask": 6, "layout": 5, "scale": 2, "qk_matmul": 1, "softmax": 5, "pv_matmul": 1}
    for n in ("efficient", "flash", "cudnn"):
        assert stages(n) == ["fused_attention"]
    assert variants["cudnn"][0].truth["launch_api"] == {syn.CUDNN_KERNEL: "cuLaunchKernelEx"}


def test_kernel_less_ops_exist(variants):
    for name, (_, events) in variants.items():
        with_kernels = {e["args"].get("External id") for e in events if e.get("cat") in GPU_CATS}
        empties = [e for e in events if e.get("name") == "aten::empty" and e.get("cat") == "cpu_op"]
        assert empties and not any(e["args"]["External id"] in with_kernels for e in empties), name


def test_variants_are_deterministic(tmp_path):
    a, b = syn.post_variants(["flash"])["flash"], syn.post_variants(["flash"])["flash"]
    a.write(tmp_path / "a.json.gz")
    b.write(tmp_path / "b.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()


def test_legacy_variants_build():
    v = syn.post_variants(["naive"], legacy=True)["naive"]
    events = load(v.builder.dumps())["traceEvents"]
    assert not any(e.get("cat") in ("cpu_op", "kernel", "gpu_user_annotation") for e in events)
    assert sum(e.get("cat") == "Kernel" for e in events) == 5 * 3 + 1  # 5 kernels + 1 Memcpy per forward, + orphan
    assert sum(e.get("cat") == "Memcpy" for e in events) == 3
