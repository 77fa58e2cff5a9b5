"""sample_traces/gpu_h200: real captures on an NVIDIA H200 (``python -m capture samples --gpu``).

The ground truth is independent of tracekit: the profiler's own ``key_averages()`` figures,
which the capture wrote beside each trace (``NAME.key_averages.json``), and the labelled
twin of the unlabelled Llama trace (same model, same inputs, recorded one after the other).
"""

import gzip
import json
from pathlib import Path

import pytest

import tracekit

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces" / "gpu_h200"
MANIFEST = json.loads((SAMPLES / "manifest.json").read_text(encoding="utf-8"))
VARIANTS = [t["impl"] for t in MANIFEST["traces"]]
# The fused variants and the kernel implementation their attention kernel is named for.
FUSED = {"efficient": "efficient", "flash": "flash", "cudnn": "cudnn", "auto": "cudnn", "flex": "flex"}


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    out = tmp_path_factory.mktemp("h200") / "h200.duckdb"
    with tracekit.load(SAMPLES, output=out) as trace:
        yield trace


def _calls(trace, name: str) -> list[tuple[int, int]]:
    """(gpu_ns, attention_kernel_ns) of each attention call of the trace labelled `name`."""
    return trace.sql(
        """SELECT c.gpu_ns, c.attention_kernel_ns FROM attention_calls c JOIN traces t USING (trace_id)
           WHERE t.trace = $t ORDER BY c.ts_ns""",
        {"t": name},
    ).fetchall()


def _stages(trace, name: str) -> dict[str, tuple[int, int]]:
    """stage -> (gpu_ops, gpu_ns) of the stage_breakdown query, for the trace labelled `name`."""
    return {
        r["stage"]: (r["gpu_ops"], r["gpu_ns"])
        for r in trace.query("stage_breakdown").to_dicts()
        if r["trace"] == name and r["gpu_ns"] > 0
    }


def _key_averages(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.key_averages.json").read_text(encoding="utf-8"))["regions"]


def test_the_samples_are_recordings_on_an_h200():
    assert MANIFEST["gpu_name"] == "NVIDIA H200" and MANIFEST["device"] == "cuda"
    assert set(VARIANTS) == {"naive", "inplace", "math", "efficient", "flash", "cudnn", "auto", "flex"}
    for entry in MANIFEST["traces"] + MANIFEST["models"]:
        with gzip.open(SAMPLES / entry["file"], "rt") as fh:
            top = json.load(fh)
        assert "synthetic" not in top
        assert top["tracekit_capture"]["gpu_name"] == "NVIDIA H200"
        assert any(e.get("cat") == "kernel" for e in top["traceEvents"]), entry["file"]


@pytest.mark.parametrize("impl", VARIANTS)
def test_attention_calls_match_the_profilers_own_figures(h200, impl):
    """Calls and GPU time per variant equal torch's key_averages() to the nanosecond."""
    region = _key_averages(impl)[f"attention:{impl}"]
    calls = _calls(h200, impl)
    assert len(calls) == region["count"] == 3
    assert sum(gpu for gpu, _ in calls) == round(region["device_time_total_us"] * 1000)


@pytest.mark.parametrize("impl", ["naive", "inplace"])
def test_labelled_stages_match_the_profilers_stage_ranges(h200, impl):
    regions = {k.removeprefix("stage:"): v for k, v in _key_averages(impl).items() if k.startswith("stage:")}
    got = {stage: gpu_ns for stage, (_, gpu_ns) in _stages(h200, impl).items()}
    assert got == {stage: round(r["device_time_total_us"] * 1000) for stage, r in regions.items()}


@pytest.mark.parametrize("impl", sorted(FUSED))
def test_fused_variants_count_their_attention_kernel(h200, impl):
    """Every fused variant's attention kernel is recognised by name, flex's Triton template too."""
    rows = h200.sql(
        """SELECT g.name, s.stage, s.attention_kernel, s.kernel_impl
           FROM gpu_op_stages s JOIN gpu_ops g ON g.id = s.id JOIN traces t ON t.trace_id = g.trace_id
           WHERE t.trace = $t AND s.attention_kernel""",
        {"t": impl},
    ).fetchall()
    assert len(rows) == 3, rows  # one attention kernel per forward
    assert {(stage, kernel_impl) for _, stage, _, kernel_impl in rows} == {("fused_attention", FUSED[impl])}
    assert all(0 < kernel <= gpu for gpu, kernel in _calls(h200, impl))


def test_flex_template_runs_on_tensor_cores(h200):
    rows = h200.query("kernel_classes").to_dicts()
    flex = [r for r in rows if r["trace"] == "flex"]
    assert [(r["name"], r["precision"]) for r in flex] == [("triton_tem_fused_flex_attention_0", "tensor_core")]


def test_unlabelled_llama_finds_what_its_labels_say(h200):
    """Eager attention with no label at all: the calls and every stage equal the labelled run's (the
    pattern found by op order widens to the block: projections, RoPE, KV cache, o_proj)."""
    labelled, unlabelled = (
        h200.sql("SELECT trace FROM traces WHERE path LIKE $p", {"p": f"%/{name}.json.gz"}).fetchall()[0][0]
        for name in ("llama_eager", "llama_eager_unlabelled")
    )
    config = MANIFEST["models"][0]["config"]
    steps = 3  # profiled steps of the schedule
    assert len(_calls(h200, labelled)) == len(_calls(h200, unlabelled)) == config["num_hidden_layers"] * steps
    # Two recordings: the same kernels in each stage, durations within run-to-run noise.
    kernels = """SELECT s.stage, list(g.name ORDER BY g.name) FROM gpu_op_stages s JOIN gpu_ops g ON g.id = s.id
                 JOIN traces t ON t.trace_id = g.trace_id
                 WHERE t.trace = $t AND s.call_id IS NOT NULL GROUP BY 1"""
    mine = dict(h200.sql(kernels, {"t": unlabelled}).fetchall())
    expected = {"qkv_proj", "rope", "kv_cache", "layout", "qk_matmul", "scale", "mask", "softmax", "pv_matmul"}
    assert set(mine) == expected | {"out_proj"}
    assert mine == dict(h200.sql(kernels, {"t": labelled}).fetchall())
    theirs = _stages(h200, labelled)
    for stage, (ops, gpu_ns) in _stages(h200, unlabelled).items():
        assert ops == theirs[stage][0] and gpu_ns == pytest.approx(theirs[stage][1], rel=0.03), stage


@pytest.mark.parametrize("name", ["llama_eager", "llama_train_sdpa"])
def test_labelled_llama_rope_and_kv_cache_by_their_place_in_the_call(h200, name):
    """The capture module labels the call and its projections, not RoPE (a function, recorded
    without Python stacks): its ops are rope by their place in the call. Hugging Face's
    apply_rotary_pos_emb runs, for q and for k, x * cos, rotate_half(x) (a neg and a cat) times
    sin and an add: 10 GPU ops per forward call. Eager attention then scales and masks the scores
    once each; SDPA's fused kernel does both itself, so its calls have no scale or mask kernel. The
    model's DynamicCache appends k and v along the sequence axis (cat, dim -2): 2 kv_cache ops."""
    rows = h200.sql(
        """SELECT c.call_id, s.stage, count(*) FROM gpu_op_stages s JOIN attention_calls c USING (call_id)
           JOIN traces t ON t.trace_id = c.trace_id
           WHERE t.trace = $t AND c.direction = 'forward' AND s.stage IN ('rope', 'scale', 'mask', 'kv_cache')
           GROUP BY ALL""",
        {"t": name},
    ).fetchall()
    per_call: dict[int, dict[str, int]] = {}
    for call, stage, n in rows:
        per_call.setdefault(call, {})[stage] = n
    eager = name == "llama_eager"
    want = {"rope": 10, "kv_cache": 2, "scale": 1, "mask": 1} if eager else {"rope": 10, "kv_cache": 2}
    assert len(per_call) == len(_calls(h200, name)) // (1 if eager else 2)
    assert all(found == want for found in per_call.values()), per_call


@pytest.mark.parametrize("impl", ["naive", "inplace", "math", "efficient", "flash", "cudnn"])
def test_calls_carry_the_recorded_shapes(h200, impl):
    """Shapes (and so FLOPs and TFLOP/s) come from the SDPA op or, for the labelled hand-written
    variants, from the first matmul inside their stage:qk_matmul range."""
    shape = MANIFEST["shapes"]
    rows = h200.sql(
        """SELECT c.batch, c.heads, c.seq_q, c.seq_kv, c.head_dim, c.flops, c.causal
           FROM attention_calls c JOIN traces t USING (trace_id) WHERE t.trace = $t""",
        {"t": impl},
    ).fetchall()
    full = 4 * shape["batch"] * shape["heads"] * shape["seq_q"] * shape["seq_kv"] * shape["head_dim"]
    dims = (shape["batch"], shape["heads"], shape["seq_q"], shape["seq_kv"], shape["head_dim"])
    # SDPA says it ran causally (half the products); the hand-written variants multiply in full.
    expected = (*dims, full // 2, True) if impl not in ("naive", "inplace") else (*dims, full, None)
    assert rows == [expected] * 3


def _backward_of_label_ns(name: str, label: str) -> int:
    """GPU time autograd spent on the forward ops inside ``label``, read off the trace by plain Python:
    the autograd nodes (Fwd thread id > 0) whose Sequence number a forward op inside a ``label`` range
    carries, the runtime calls inside those nodes on their thread, and the GPU ops of their correlation
    ids (exact decimal microseconds)."""
    from decimal import Decimal

    with gzip.open(SAMPLES / f"{name}.json.gz", "rt", encoding="utf-8") as fh:
        events = json.load(fh, parse_float=Decimal)["traceEvents"]

    def span(e):
        return e["tid"], e["ts"], e["ts"] + e["dur"]

    def inside(e, spans):
        tid, ts, end = span(e)
        return any(tid == t and s <= ts and end <= x for t, s, x in spans)

    ops = [e for e in events if e.get("cat") == "cpu_op"]
    labels = [span(e) for e in events if e.get("cat") == "user_annotation" and e["name"] == label]
    seqs = {
        e["args"]["Sequence number"]
        for e in ops
        if e["args"].get("Fwd thread id") == 0 and e["args"].get("Sequence number") is not None and inside(e, labels)
    }
    nodes = [span(e) for e in ops if (e["args"].get("Fwd thread id") or 0) > 0 and e["args"]["Sequence number"] in seqs]
    launched = {
        e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and inside(e, nodes)
    }
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return int(sum(e["dur"] for e in gpu if e["args"].get("correlation") in launched) * 1000)


def test_training_step_counts_each_backward_attention_as_one_call(h200):
    """The training step's backward: each SDPA backward op (on autograd's thread, outside the forward's
    labels) is one attention call holding its bprop kernel and helpers, not one call per kernel; the
    forward calls match the profiler's own figures to the nanosecond."""
    model = next(m for m in MANIFEST["models"] if m.get("training"))
    name = model["file"].removesuffix(".json.gz")
    calls = h200.sql(
        """SELECT c.op, c.impl, c.call_source, c.gpu_ops, c.gpu_ns, c.attention_kernel_ns
           FROM attention_calls c JOIN traces t USING (trace_id) WHERE t.trace = $t""",
        {"t": name},
    ).fetchall()
    forward = [c for c in calls if c[0].startswith("attention:")]
    backward = [c for c in calls if c[0].endswith("_backward")]
    layers_x_steps = model["config"]["num_hidden_layers"] * 3
    assert len(forward) == len(backward) == layers_x_steps and len(calls) == 2 * layers_x_steps
    region = _key_averages(name)["attention:LlamaAttention"]
    assert sum(c[4] for c in forward) == round(region["device_time_total_us"] * 1000)
    for op, impl, source, gpu_ops, gpu_ns, kernel_ns in backward:
        assert op == "aten::_scaled_dot_product_cudnn_attention_backward" and impl == "cudnn" and source == "op"
        assert gpu_ops >= 3 and 0 < kernel_ns <= gpu_ns  # bprop, compute_dot_do_o, convert_dq (a memset)
    # Each backward call also holds the gradients of the rest of its forward call (the projections,
    # RoPE): every GPU op autograd ran for a forward op inside the label, by its Sequence number.
    assert sum(c[4] for c in backward) == _backward_of_label_ns(name, "attention:LlamaAttention")
    # Shapes from the backward's query and key (its Input Dims start with grad_out), and 2.5 times a
    # forward's FLOPs (five products against two), halved by the causal mask.
    shaped = h200.sql(
        """SELECT c.direction, c.batch, c.heads, c.kv_heads, c.seq_q, c.seq_kv, c.head_dim, c.causal, c.flops
           FROM attention_calls c JOIN traces t USING (trace_id)
           WHERE t.trace = $t AND c.direction = 'backward'""",
        {"t": name},
    ).fetchall()
    config, seq = model["config"], model["seq"]
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    dims = (model["batch"], config["num_attention_heads"], config["num_key_value_heads"], seq, seq, head_dim)
    flops = int(4 * model["batch"] * config["num_attention_heads"] * seq * seq * head_dim * 0.5 * 2.5)
    assert shaped == [("backward", *dims, True, flops)] * layers_x_steps
    kernels = h200.sql(
        """SELECT DISTINCT s.stage, s.attention_kernel FROM gpu_op_stages s JOIN gpu_ops g ON g.id = s.id
           JOIN traces t ON t.trace_id = g.trace_id
           WHERE t.trace = $t AND (g.name LIKE '%sdpa%bprop%' OR g.name LIKE 'cudnn::fusion::%')""",
        {"t": name},
    ).fetchall()
    assert kernels == [("fused_attention", True)]


def test_report_counts_a_training_steps_backward_apart():
    """On the H200 training step the report's per-call numbers are the forward calls' (the profiler's own
    module figures), the backward calls get rows of their own; a report without backward calls has none."""
    from tracekit.analysis import report
    from tracekit.analysis.report_render import _rows

    model = next(m for m in MANIFEST["models"] if m.get("training"))
    rep = report.build([SAMPLES / model["file"], SAMPLES / "naive.json.gz"])
    train, naive = rep.traces
    layers_x_steps = model["config"]["num_hidden_layers"] * 3
    region = _key_averages(model["file"].removesuffix(".json.gz"))["attention:LlamaAttention"]
    assert train.headline["attention_calls"] == layers_x_steps == train.headline["backward_calls"]
    assert train.headline["gpu_ns_per_call"] == pytest.approx(region["device_time_total_us"] * 1000 / layers_x_steps)
    backward_ns = _backward_of_label_ns(model["file"].removesuffix(".json.gz"), "attention:LlamaAttention")
    assert train.headline["backward_gpu_ns_per_call"] == pytest.approx(backward_ns / layers_x_steps)
    assert naive.headline["backward_calls"] == 0 and naive.headline["backward_gpu_ns_per_call"] is None
    assert "backward_calls" in [key for key, *_ in _rows(rep)]
    alone = report.build([SAMPLES / "naive.json.gz", SAMPLES / "flash.json.gz"])
    assert not any(key.startswith("backward") for key, *_ in _rows(alone))
