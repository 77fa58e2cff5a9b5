"""serving_steps and serving_phases on today's engines: the shared vLLM, SGLang and graph-replay traces (numbers
pinned to a count made here from the raw JSON), the CPU recordings of capture.serving that annotate their steps as
vLLM V1, vLLM, SGLang and TGI do (truth: the plan in their manifest), and synthetic traces whose steps, warm-up and
graph replays are known by construction."""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import pytest
from conftest import slow_unless
from synthetic import TraceBuilder

import tracekit

ROOT = Path(__file__).resolve().parents[1]
SERVING = ROOT / "sample_traces" / "cpu_serving"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _raw_steps(path: Path, name_re: str, inner_op: str | None = None) -> list[dict]:
    """From the raw JSON, without tracekit: the outermost user_annotation ranges whose name matches ``name_re``,
    each with the GPU ops whose launch (a runtime or driver call on the range's thread, inside it) carries their
    correlation id, and the GPU time of those launched inside a cpu_op named ``inner_op``."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ranges = [e for e in events if e.get("cat") == "user_annotation" and re.search(name_re, e["name"])]
    ranges = [
        r for r in ranges
        if not any(o is not r and o["tid"] == r["tid"] and o["ts"] <= r["ts"] and o["ts"] + o["dur"] >= r["ts"] + r["dur"]
                   for o in ranges)
    ]  # fmt: skip
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    inner = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == inner_op]
    gpu = {}
    for e in events:
        if e.get("cat") in GPU_CATS and "correlation" in e.get("args", {}):
            gpu.setdefault(e["args"]["correlation"], []).append(e)
    out = []
    for r in ranges:
        mine = [
            c
            for c in launches
            if c["pid"] == r["pid"] and c["tid"] == r["tid"] and r["ts"] <= c["ts"] <= r["ts"] + r["dur"]
        ]
        ops = [g for c in mine for g in gpu.get(c["args"].get("correlation"), [])]
        in_op = [
            g for c in mine if any(o["tid"] == c["tid"] and o["ts"] <= c["ts"] <= o["ts"] + o["dur"] for o in inner)
            for g in gpu.get(c["args"].get("correlation"), [])
        ]  # fmt: skip
        out.append(dict(name=r["name"], gpu_ops=len(ops), gpu_us=sum(g["dur"] for g in ops),
                        inner_us=sum(g["dur"] for g in in_op)))  # fmt: skip
    return out


def _steps(trace) -> list[dict]:
    return trace.query("serving_steps").to_dicts()


def _check_against_raw(step: dict, raw: dict) -> None:
    assert step["name"] == raw["name"]
    assert step["gpu_ops"] == raw["gpu_ops"]
    # Microseconds with fractions become whole nanoseconds: at most one off per op.
    assert step["gpu_ns"] == pytest.approx(raw["gpu_us"] * 1000, abs=raw["gpu_ops"])


def test_serving_steps_on_the_shared_vllm_trace(load_shared, shared_dir):
    """vLLM on B200, eager: one prefill step of 1 request and 888 tokens (execute_context_1(888_788544): 888 query
    tokens, 888 x 888 = 788544), its 929 GPU ops; the paged-attention kernels are part of its attention time."""
    path = shared_dir / "tracelens" / "b200_vllm_eager_paged-fp8.json.gz"
    (raw,) = _raw_steps(path, r"^execute_", inner_op="vllm::unified_attention_with_output")
    (step,) = _steps(load_shared("tracelens/b200_vllm_eager_paged-fp8.json.gz"))
    _check_against_raw(step, raw)
    assert (step["phase"], step["engine"], step["kind"], step["step"]) == ("prefill", "vllm", "step", 1)
    assert (step["context_requests"], step["generation_requests"], step["context_tokens"], step["generation_tokens"]) == (
        1, 0, 888, 0,
    )  # fmt: skip
    assert (step["requests"], step["tokens"], step["gpu_ops"]) == (1, 888, 929)
    assert raw["inner_us"] * 1000 - raw["gpu_ops"] <= step["attention_gpu_ns"] < step["gpu_ns"]
    assert step["attention_ns_per_token"] == pytest.approx(step["attention_gpu_ns"] / 888)
    assert step["steady_state"] is None  # one step: the spread cannot be told


@pytest.mark.slow  # reads the 62,000 events of the raw JSON
def test_serving_steps_on_the_shared_sglang_capture_trace(load_shared, shared_dir):
    """SGLang on MI300X, the batch-32 decode graph's capture pass (capture_32_DECODE): one step, a capture (warm-up,
    never steady state) of 32 decode requests; the Qwen3Model forward inside it is part of it, not a step."""
    path = shared_dir / "tracelens" / "mi300_sglang_qwen3-8b_capture_modules.json.gz"
    (raw,) = _raw_steps(path, r"^capture_")
    (step,) = _steps(load_shared("tracelens/mi300_sglang_qwen3-8b_capture_modules.json.gz"))
    _check_against_raw(step, raw)
    assert (step["phase"], step["engine"], step["kind"]) == ("decode", "sglang", "capture")
    assert (step["generation_requests"], step["steady_state"], step["gpu_ops"]) == (32, False, 2)


def test_serving_steps_on_the_shared_sglang_graph_replay_trace(load_shared, shared_dir):
    """SGLang decode on MI300X through one HIP graph replay: one step (execute_32_context_0(...)_generation_32(...) with
    step[DECODE bs=32] inside it, part of it), 32 requests of one token each; the replay's 544 kernels and the eager
    ops around it are its 558 GPU ops; the paged-attention kernels are part of its attention time."""
    path = shared_dir / "tracelens" / "mi300_sglang_qwen3-8b_decode_hipgraph.json.gz"
    (raw,) = _raw_steps(path, r"^execute_|^step\[")
    trace = load_shared("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz")
    (step,) = _steps(trace)
    _check_against_raw(step, raw)
    assert (step["phase"], step["engine"], step["source"]) == ("decode", "amd_profile", "annotation")
    assert (step["context_requests"], step["generation_requests"], step["generation_tokens"]) == (0, 32, 32)
    assert step["gpu_ops"] == 558
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    paged = sum(e["dur"] for e in events if e.get("cat") == "kernel" and "paged_attention" in e["name"])
    assert paged * 1000 - 72 <= step["attention_gpu_ns"] < step["gpu_ns"]
    assert step["attention_ns_per_request"] == pytest.approx(step["attention_gpu_ns"] / 32)
    (decode,) = {r["phase"]: r for r in trace.query("serving_phases").to_dicts() if r["stage"] == "other"}.values()
    assert (decode["steps"], decode["requests"], decode["tokens"]) == (1, 32, 32)
    assert decode["attention_gpu_ns"] == step["attention_gpu_ns"]
    assert decode["attention_share_pct"] == pytest.approx(step["attention_share_pct"])


MANIFEST = json.loads((SERVING / "manifest.json").read_text())


@pytest.mark.parametrize(
    "entry", [slow_unless(e["engine"] == "vllm_v1", e, id=e["engine"]) for e in MANIFEST["traces"]]
)
def test_serving_steps_on_cpu_recordings_of_each_engine(entry, inputs):
    """capture.serving's CPU recordings: every planned step found once, in order, with its phase (and, where the
    engine's name records them, its requests and tokens). SGLang's decode graph capture comes as one capture
    before the first decode; TGI writes no range, so its steps are its model's forward scopes (phase unknown)."""
    engine, plan = entry["engine"], MANIFEST["plan"]
    steps = [s for s in _steps(inputs.trace(SERVING / entry["file"])) if s["kind"] != "capture"]
    assert [s["step"] for s in _steps(inputs.trace(SERVING / entry["file"]))] == list(
        range(1, len(plan) + 1 + (engine == "sglang"))
    )
    assert len(steps) == len(plan)
    if engine == "tgi":
        assert {(s["kind"], s["source"], s["phase"]) for s in steps} == {("forward", "python", "unknown")}
        return
    assert [s["phase"] for s in steps] == [p["phase"] for p in plan]
    assert [s["requests"] for s in steps] == [p["context_requests"] + p["generation_requests"] for p in plan]
    if engine != "vllm_v1":  # vLLM V1's name has request counts only
        assert [s["tokens"] for s in steps] == [p["tokens"] for p in plan]
    if engine in ("vllm", "vllm_v1"):
        assert [(s["context_requests"], s["generation_requests"]) for s in steps] == [
            (p["context_requests"], p["generation_requests"]) for p in plan
        ]
    if engine == "sglang":
        (cap,) = [s for s in _steps(inputs.trace(SERVING / entry["file"])) if s["kind"] == "capture"]
        assert (cap["step"], cap["name"], cap["steady_state"]) == (2, "capture_2_DECODE", False)


def test_steady_state_is_the_window_after_the_slow_first_steps_by_construction(tmp_path):
    """Six decode steps whose first two take 10x longer (a warm-up) and a capture pass before them: the capture and
    the two slow steps are not steady state, the four others are; one prefill step alone cannot tell (NULL). A
    launch of a graph outside every step is a decode step of its own; a vLLM V1 forward scope outside
    execute_new_ (an outside profiler) is a step, inside it part of the step. A replay is decode when it runs a
    decode attention kernel (split-KV), else its phase is unknown; so is a model's forward scope (TGI)."""
    b = TraceBuilder()
    t = 0
    b.user_annotation("execute_new_4_cached_0", t, 40_000)
    b.op_with_kernels("aten::mm", t + 1_000, [("gemm", None, 4_000)])
    t = 100_000
    b.user_annotation("capture_4_DECODE", t, 30_000)
    t = 200_000
    for dur in [400_000, 380_000, 40_000, 41_000, 39_000, 40_500]:
        b.user_annotation("execute_new_0_cached_4", t, dur)
        b.user_annotation("gpu_model_runner: forward", t + 1_000, dur - 2_000)
        b.op_with_kernels("vllm::unified_attention_with_output", t + 2_000, [("flash_fwd_kernel", None, 3_000)])
        t += dur + 10_000
    b.graph_launch(t, [("gemm", None, 3_000), ("flash_fwd_splitkv_kernel", None, 1_000)])  # split-KV: decode
    t += 50_000
    b.user_annotation("gpu_model_runner: forward", t, 20_000)
    b.graph_launch(t + 100_000, [("gemm", None, 3_000), ("flash_fwd_kernel", None, 1_000)])  # no decode kernel
    # TGI: no range; its model's forward scope, running a paged-attention kernel (decode).
    b.python_function("nn.Module: FlashLlamaForCausalLM_0", t + 200_000, 30_000)
    b.op_with_kernels("vllm::unified_attention_with_output", t + 202_000, [("paged_attention_v1_kernel", None, 2_000)])
    b.finish()
    b.write(tmp_path / "steady.json.gz")
    with tracekit.load(tmp_path / "steady.json.gz") as trace:
        steps = _steps(trace)
        phases = {(r["phase"], r["stage"]): r for r in trace.query("serving_phases").to_dicts()}
        steady = {(r["phase"], r["stage"]): r for r in trace.query("serving_phases", steady_only=True).to_dicts()}
    got = [(s["name"], s["phase"], s["kind"], s["steady_state"]) for s in steps]
    assert got == [
        ("execute_new_4_cached_0", "prefill", "step", None),
        ("capture_4_DECODE", "decode", "capture", False),
        *[("execute_new_0_cached_4", "decode", "step", steady) for steady in (False, False, True, True, True, True)],
        ("cudaGraphLaunch", "decode", "graph_replay", True),
        ("gpu_model_runner: forward", "unknown", "forward", None),
        ("cudaGraphLaunch", "unknown", "graph_replay", None),
        ("nn.Module: FlashLlamaForCausalLM_0", "decode", "forward", True),
    ]
    assert [s["step"] for s in steps] == list(range(1, 13))
    assert [s["gpu_ops"] for s in steps] == [1, 0, 1, 1, 1, 1, 1, 1, 2, 0, 2, 1]
    # Decode: six steps of 4 requests, a replay and a forward without counts; the capture is left out.
    decode = phases[("decode", "fused_attention")]
    assert (decode["steps"], decode["steady_steps"], decode["requests"]) == (8, 6, 24)
    assert decode["attention_ns_per_request"] == pytest.approx(6 * 3_000 / 24)
    # steady_only: the window's six decode steps (four of 4 requests); prefill (one step) has no window.
    decode = steady[("decode", "fused_attention")]
    assert (decode["steps"], decode["steady_steps"], decode["requests"]) == (6, 6, 16)
    assert {phase for phase, _ in steady} == {"decode"}


@pytest.mark.slow  # records on the CPU (torch)
def test_record_serving_writes_the_plan_it_was_given(tmp_path):
    """capture.serving's recorder, run again: a trace per engine whose steps are its plan, and a manifest saying so."""
    pytest.importorskip("torch")
    from capture.serving import DEFAULT_PLAN, record_serving_samples

    manifest = json.loads(record_serving_samples(tmp_path, engines=("sglang",)).read_text())
    assert manifest["plan"] == MANIFEST["plan"] and len(manifest["plan"]) == len(DEFAULT_PLAN)
    with tracekit.load(tmp_path / "serving_sglang.json.gz") as trace:
        steps = [s for s in _steps(trace) if s["kind"] == "step"]
    assert [(s["phase"], s["requests"]) for s in steps] == [
        (p["phase"], p["context_requests"] + p["generation_requests"]) for p in manifest["plan"]
    ]


def test_a_user_rule_row_teaches_serving_steps_a_new_engines_names(tmp_path):
    """The engines' names are data: a serving_steps.csv row in a --rules folder (same columns) makes an unknown
    engine's range a step with its counts; every shipped row says where its names were seen."""
    from tracekit.model import rules

    shipped = (rules.SHIPPED / "serving_steps.csv").read_text().splitlines()
    rows = list(csv.DictReader(shipped))
    assert all(r["versions"] and r["note"] for r in rows)
    b = TraceBuilder()
    for i in range(3):
        b.user_annotation(f"myengine_iter ctx={i + 1} gen=4", i * 100_000, 50_000)
        b.op_with_kernels("aten::mm", i * 100_000 + 1_000, [("gemm", None, 4_000)])
    b.finish()
    b.write(tmp_path / "mine.json.gz")
    folder = tmp_path / "rules"
    folder.mkdir()
    row = "^myengine_iter ,annotation,myengine,step,,ctx=([0-9]+),gen=([0-9]+),,,,,myengine 1.0,one iteration"
    (folder / "serving_steps.csv").write_text(shipped[0] + "\n" + row + "\n")
    with tracekit.load(tmp_path / "mine.json.gz") as trace:
        assert _steps(trace) == []
        steps = _steps(trace.use_rules([folder]))
    assert [(s["engine"], s["phase"], s["context_requests"], s["generation_requests"]) for s in steps] == [
        ("myengine", "mixed", i, 4) for i in (1, 2, 3)
    ]
    assert [s["gpu_ops"] for s in steps] == [1, 1, 1]
