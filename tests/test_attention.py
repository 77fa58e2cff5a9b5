"""Attention-stage attribution and the attention queries, against known answers.

Synthetic variants of the post (tests/synthetic.py, truth by construction), the
real GPU traces in ../shared/traces with their reference reports, and CPU traces
recorded by the capture module.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter

import pytest
from click.testing import CliRunner
from conftest import ROOT, SHARED_TRACES, VARIANTS
from synthetic import post_variants

import tracekit
from tracekit.cli import cli

IMPL = {
    "naive": "naive",
    "inplace": "naive",
    "math": "math",
    "efficient": "efficient",
    "flash": "flash",
    "cudnn": "cudnn",
}


@pytest.fixture(scope="module")
def variants(post_traces):
    return {name: (trace, v.truth) for name, (trace, v) in post_traces.items()}


@pytest.mark.parametrize("name", VARIANTS)
def test_every_gpu_op_gets_its_true_stage(name, variants):
    trace, truth = variants[name]
    got = dict(
        trace.sql("SELECT g.ts_ns, s.stage FROM gpu_op_stages s JOIN gpu_ops g USING (id) WHERE NOT s.orphan").rows()
    )
    want = {op["ts_ns"]: op["stage"] for op in truth["gpu_ops"] if not op["orphan"]}
    assert got == want


@pytest.mark.parametrize("name", VARIANTS)
def test_stage_breakdown_equals_truth(name, variants):
    trace, truth = variants[name]
    rows = {r["stage"]: r for r in trace.query("stage_breakdown").to_dicts()}
    ops = Counter(op["stage"] for op in truth["gpu_ops"] if not op["orphan"])
    ns = Counter()
    for op in truth["gpu_ops"]:
        if not op["orphan"]:
            ns[op["stage"]] += op["dur_ns"]
    assert {s: r["gpu_ops"] for s, r in rows.items() if r["gpu_ops"]} == dict(ops)
    assert {s: r["gpu_ns"] for s, r in rows.items() if r["gpu_ns"]} == dict(ns)
    # Each decision is accounted to a source, and here the launching op decides every one.
    assert all(r["gpu_by_op"] == r["gpu_ops"] for r in rows.values())


@pytest.mark.parametrize("name", VARIANTS)
def test_region_summary_reads_the_posts_table(name, variants):
    trace, truth = variants[name]
    region = truth["region"]
    want = truth["regions"][region]
    row = trace.query("region_summary", pattern=f"^{region}$").to_dicts()[0]
    assert row["occurrences"] == want["occurrences"] == 3
    assert row["gpu_ops_per_occurrence"] == want["gpu_ops_per_occurrence"] == truth["gpu_ops_per_forward"]
    assert row["gpu_time_avg_ns"] == pytest.approx(want["gpu_time_avg_ns"], abs=1)
    assert row["cpu_time_avg_ns"] == pytest.approx(want["cpu_time_avg_ns"], abs=1)


def test_gpu_ops_per_forward_are_the_posts():
    per_forward = {n: v.truth["gpu_ops_per_forward"] for n, v in post_variants().items()}
    assert per_forward == {"naive": 6, "inplace": 5, "math": 20, "efficient": 1, "flash": 1, "cudnn": 1}


@pytest.mark.parametrize("name", VARIANTS)
def test_attention_calls(name, variants):
    trace, truth = variants[name]
    calls = trace.query("attention_calls").to_dicts()
    assert len(calls) == 3
    assert {c["impl"] for c in calls} == {IMPL[name]}
    forward = truth["gpu_ops_per_forward"]
    assert all(c["gpu_ops"] == forward for c in calls)
    gpu = [c["gpu_ns"] for c in calls]
    assert gpu == truth["regions"][truth["region"]]["gpu_time_ns"]
    # Kernel-level time leaves out helper work: the naive copy, the math path's casts.
    for c in calls:
        assert c["attention_kernel_ns"] <= c["gpu_ns"]
    if name in ("efficient", "flash", "cudnn"):
        assert all(c["attention_kernel_ns"] == c["gpu_ns"] for c in calls)
        assert all(
            (c["batch"], c["heads"], c["seq_q"], c["head_dim"], c["causal"]) == (8, 16, 1024, 64, True) for c in calls
        )
        assert all(c["flops"] == 4 * 8 * 16 * 1024 * 1024 * 64 // 2 for c in calls)
    if name == "naive":
        memcpy = sum(op["dur_ns"] for op in truth["gpu_ops"] if op["kind"] == "memcpy" and not op["orphan"])
        assert sum(c["gpu_ns"] - c["attention_kernel_ns"] for c in calls) == memcpy
    # The orphan kernel left by warm-up is its own call, shown only on request.
    every = trace.query("attention_calls", include_orphans=True).to_dicts()
    orphans = [c for c in every if c["orphan"]]
    assert len(every) == 3 + len(orphans)
    if name in ("efficient", "flash", "cudnn"):
        assert len(orphans) == 1 and orphans[0]["call_source"] == "kernel"


def test_math_is_told_apart_from_naive_by_its_ops(variants):
    math_trace, _ = variants["math"]
    sources = math_trace.sql("SELECT DISTINCT rule FROM gpu_op_stages WHERE stage = 'qk_matmul'")["rule"].to_list()
    assert sources == ["^aten::(bmm|matmul|baddbmm|einsum)$"]


# --- Real traces ------------------------------------------------------------------------


def _sdpa_expected(shared_dir, name):
    with open(shared_dir / "tracelens" / f"{name}.expected" / "SDPA_fwd.csv") as fh:
        return next(csv.DictReader(fh))


def test_h100_flash_calls_match_the_reference_report(shared_dir, load_shared):
    ref = _sdpa_expected(shared_dir, "h100_bert-small_sdpa-flash")
    calls = load_shared("tracelens/h100_bert-small_sdpa-flash.json.gz").query("attention_calls").to_dicts()
    assert len(calls) == int(ref["name_count"]) == 4
    assert {c["impl"] for c in calls} == {"flash"}
    kernel_us = sum(c["attention_kernel_ns"] for c in calls) / 1000
    assert kernel_us == pytest.approx(float(ref["Kernel Time (µs)_sum"]), rel=1e-4)
    for c in calls:
        assert (c["batch"], c["seq_q"], c["heads"], c["seq_kv"], c["head_dim"]) == (
            int(ref["param: B"]),
            int(ref["param: N_Q"]),
            int(ref["param: H_Q"]),
            int(ref["param: N_KV"]),
            int(ref["param: d_h_qk"]),
        )
        assert c["causal"] is (ref["param: causal"] == "True")
        assert c["flops"] == pytest.approx(float(ref["GFLOPS_first"]) * 1e9)
    mean_tflops = sum(c["tflops_per_s"] for c in calls) / len(calls)
    assert mean_tflops == pytest.approx(float(ref["TFLOPS/s_mean"]), rel=2e-3)


def test_mi300_flash_calls_at_op_level_match_the_reference_report(shared_dir, load_shared):
    ref = _sdpa_expected(shared_dir, "mi300_bert-small_sdpa-flash")
    trace = load_shared("tracelens/mi300_bert-small_sdpa-flash.json.gz")
    calls = trace.query("attention_calls").to_dicts()
    # The trace has nn.Module scopes: each BertAttention module is one call (projections included) ...
    assert len(calls) == 4 and {c["impl"] for c in calls} == {"flash"}
    assert {c["call_source"] for c in calls} == {"module"}
    assert all(c["op"].startswith("nn.Module: BertAttention_") for c in calls)
    # ... and the SDPA op's own GPU ops (the reference's op-level time) are its fused_attention stage.
    fused_ns = trace.sql(
        "SELECT sum(dur_ns) FROM gpu_op_stages WHERE stage = 'fused_attention' AND call_id IS NOT NULL AND NOT orphan"
    ).rows()[0][0]
    assert float(fused_ns) / 1000 == pytest.approx(float(ref["Kernel Time (µs)_sum"]), rel=1e-4)


def test_an_unlabelled_compiled_sdpa_call_holds_its_projections(load_shared):
    """A compiled MI300 model recorded without labels or module scopes: its one SDPA call (the flash
    backend op between the q/k/v and output ``mm``s, ``[32768, 2048] x [2048, 2048]``: 16 heads of
    128) widens to its block: three qkv_proj kernels, the fused kernel, one out_proj kernel. The
    call keeps the op's source and impl, and its attention kernel time is the fused kernel's."""
    trace = load_shared("tracelens/torch_compile_triton.json.gz")
    calls = trace.query("attention_calls").to_dicts()
    assert [(c["call_source"], c["op"], c["impl"], c["gpu_ops"]) for c in calls] == [
        ("op", "aten::_scaled_dot_product_flash_attention", "flash", 5)
    ]
    stages = trace.sql(
        """SELECT s.stage, g.dur_ns FROM gpu_op_stages s JOIN gpu_ops g USING (id)
           WHERE s.call_id IS NOT NULL ORDER BY g.ts_ns"""
    ).rows()
    assert [stage for stage, _ in stages] == ["qkv_proj"] * 3 + ["fused_attention", "out_proj"]
    assert calls[0]["gpu_ns"] == sum(ns for _, ns in stages)
    assert calls[0]["attention_kernel_ns"] == dict((s, ns) for s, ns in stages)["fused_attention"]


def test_b200_vllm_paged_attention_is_fused_attention(load_shared):
    trace = load_shared("tracelens/b200_vllm_eager_paged-fp8.json.gz")
    rows = trace.sql(
        """SELECT s.stage, s.source, count(*) AS n FROM gpu_op_stages s JOIN gpu_ops g USING (id)
           WHERE g.name LIKE 'fmhaSm100aKernel%' GROUP BY ALL"""
    ).rows()
    assert rows == [("fused_attention", "op", 36)]
    calls = trace.query("attention_calls").to_dicts()
    # OAIAttention module scopes make the calls; the vLLM op inside tells the impl.
    assert {c["impl"] for c in calls} == {"paged"} and {c["call_source"] for c in calls} == {"module"}
    assert len(calls) == 36 and all(c["op"].startswith("nn.Module: OAIAttention_") for c in calls)
    stages = dict(trace.sql("SELECT stage, count(*) FROM gpu_op_stages GROUP BY stage").rows())
    assert stages["kv_cache"] == 36 and stages["rope"] == 36


def test_hip_graph_replay_is_attributed_by_kernel_name(load_shared):
    trace = load_shared("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz")
    rows = trace.sql(
        """SELECT s.stage, s.source, bool_and(g.via_graph) AS graph, count(*) AS n
           FROM gpu_op_stages s JOIN gpu_ops g USING (id) WHERE g.name LIKE '%paged_attention%' GROUP BY ALL"""
    ).rows()
    assert rows == [("fused_attention", "kernel", True, 72)]


# Attention kernels of the shared traces and the stage each must get (never "other").
ATTENTION_KERNELS = [
    ("tracelens/h100_bert-small_sdpa-flash.json.gz", "flash_fwd_kernel", "fused_attention"),
    ("tracelens/mi300_bert-small_sdpa-flash.json.gz", "attn_fwd", "fused_attention"),
    ("tracelens/torch_compile_triton.json.gz", "attn_fwd", "fused_attention"),
    ("tracelens/mi300_falconsai_vit_sdpa_modules.json.gz", "attn_fwd", "fused_attention"),
    ("tracelens/mi300_xdit_flux1_aiter-sage_t5-clip-eager.json.gz", "attn_fwd", "fused_attention"),
    ("tracelens/b200_vllm_eager_paged-fp8.json.gz", "fmhaSm100aKernel", "fused_attention"),
    ("tracelens/b200_vllm_eager_paged-fp8.json.gz", "reshape_and_cache_flash_kernel", "kv_cache"),
    ("tracelens/b200_vllm_eager_paged-fp8.json.gz", "rotary_embedding_kernel", "rope"),
    ("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz", "paged_attention_ll4mi_QKV", "fused_attention"),
    ("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz", "paged_attention_ll4mi_reduce", "fused_attention"),
    ("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz", "store_kvcache", "kv_cache"),
    ("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz", "rotary_embedding_kernel", "rope"),
    ("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz", "create_flashinfer_kv_indices", "kv_cache"),
]


@pytest.mark.parametrize("rel,kernel,stage", ATTENTION_KERNELS, ids=lambda x: str(x).split("/")[-1][:40])
def test_listed_attention_kernels_get_their_stage(rel, kernel, stage, load_shared):
    got = load_shared(rel).sql(f"SELECT DISTINCT stage FROM gpu_op_stages WHERE name LIKE '%{kernel}%'")["stage"]
    assert got.to_list() == [stage]


ATTENTION_NAME = re.compile(
    r"(?i)attn|attention|flash_fwd|fmha|sdpa|paged|rotary|rope_|kv_?cache|kv_indices|reshape_and_cache"
)


@pytest.mark.parametrize("rel", SHARED_TRACES)
def test_no_attention_kernel_ends_up_in_other(rel, load_shared):
    names = load_shared(rel).sql("SELECT DISTINCT name, stage FROM gpu_op_stages").rows()
    base = [(re.sub(r"[<(].*$", "", n.replace("(anonymous namespace)", "anon")), n, s) for n, s in names]
    missed = [n for b, n, s in base if ATTENTION_NAME.search(b) and s == "other"]
    assert missed == []
    listed = {(r, k) for r, k, _ in ATTENTION_KERNELS if r == rel}
    found = [n for b, n, s in base if ATTENTION_NAME.search(b)]
    assert all(any(k in n for n in found) for _, k in listed)
    assert all(any(k in n for _, k in listed) for n in found), f"attention kernels not in ATTENTION_KERNELS: {found}"


def test_classifier_softmax_outside_attention_stays_other(load_shared):
    trace = load_shared("hta/v100_ns_resolution.json.gz")
    assert trace.sql("SELECT DISTINCT stage FROM gpu_op_stages WHERE name LIKE '%softmax_warp%'")[
        "stage"
    ].to_list() == ["other"]


# --- CPU traces recorded by the capture module ------------------------------------------


def test_cpu_trace_stages_come_from_labels():
    with tracekit.load(ROOT / "sample_traces" / "cpu_attention" / "naive.json.gz") as trace:
        rows = {r["stage"]: r for r in trace.query("stage_breakdown").to_dicts()}
        assert set(rows) >= {"qk_matmul", "scale", "mask", "softmax", "pv_matmul"}
        assert all(r["cpu_by_label"] == r["cpu_ops"] for s, r in rows.items() if s != "other")
        calls = trace.query("attention_calls").to_dicts()
        assert len(calls) == 3 and {c["impl"] for c in calls} == {"naive"}


def test_cpu_math_trace_stages_come_from_ops():
    with tracekit.load(ROOT / "sample_traces" / "cpu_attention" / "math.json.gz") as trace:
        rows = {r["stage"]: r for r in trace.query("stage_breakdown").to_dicts()}
        assert set(rows) >= {"qk_matmul", "softmax", "pv_matmul"}
        assert rows["softmax"]["cpu_by_op"] == rows["softmax"]["cpu_ops"] > 0
        calls = trace.query("attention_calls").to_dicts()
        assert {c["impl"] for c in calls} == {"math"}
        assert {(c["batch"], c["heads"], c["seq_q"], c["head_dim"], c["causal"]) for c in calls} == {
            (2, 4, 128, 32, True)
        }


# --- User rules and the CLI -------------------------------------------------------------


def test_user_rules_change_the_attribution(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "label_stages.csv").write_text(
        "pattern,stage,call,impl,note\n^attention:(\\S+)$,softmax,yes,\\1,everything is softmax\n"
    )
    trace_path = ROOT / "sample_traces" / "cpu_attention" / "flash.json.gz"
    before = {r["stage"] for r in tracekit.load(trace_path).query("stage_breakdown").to_dicts()}
    with tracekit.load(trace_path) as trace:
        after = trace.use_rules([rules]).query("stage_breakdown").to_dicts()
    assert "fused_attention" in before
    assert {r["stage"] for r in after} - {"other"} == {"softmax"}
    res = CliRunner().invoke(cli, ["stages", str(trace_path), "--rules", str(rules), "-f", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert {r["stage"] for r in data["stage_breakdown"]} - {"other"} == {"softmax"}
    (rules / "kernel_stagez.csv").write_text("pattern\nx\n")
    res = CliRunner().invoke(cli, ["stages", str(trace_path), "--rules", str(rules)])
    assert res.exit_code != 0 and "no rule table named 'kernel_stagez'" in str(res.exception)


def test_stages_command_prints_both_tables(variants, tmp_path):
    path = tmp_path / "cudnn.json.gz"
    post_variants(["cudnn"])["cudnn"].write(path)
    res = CliRunner().invoke(cli, ["stages", str(path)])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "Stage breakdown (stage_breakdown)"
    # The warm-up step's kernel has no launch in the trace: left out, and said so on stderr.
    assert (
        res.stderr.startswith("Note: left out 1 GPU op(s) launched before the trace (")
        and "--include-orphans counts them" in res.stderr
    )
    assert lines[3].split()[:3] == ["cudnn", "fused_attention", "3"]
    assert "Attention calls (attention_calls; 3)" in lines
    assert sum(1 for ln in lines if " cudnn " in f" {ln} " and "sdpa_fwd" in ln) == 3
