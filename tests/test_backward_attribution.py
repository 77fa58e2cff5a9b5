"""A training step's backward: autograd's nodes take their forward op's stage and a backward call.

The synthetic traces are built so the answer is known by construction: a
labelled naive attention's forward on one thread, autograd's nodes for it on
another, paired only by the profiler's ``Sequence number`` (and, where the
trace has them, ``fwdbwd`` flows). A CPU capture of eager attention's
forward and backward (real torch) checks the same on a trace torch wrote.
"""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from synthetic import TraceBuilder

import tracekit
from tracekit.cli import cli

FWD_TID, OTHER_TID, BWD_TID = 100, 200, 300
QK_DIMS = [[2, 4, 64, 32], [2, 4, 32, 64]]  # [B, H, Sq, D] x [B, H, D, Skv]
FWD_FLOPS = 4 * 2 * 4 * 64 * 64 * 32
# Each backward node: (autograd node, sequence number of its forward op, its kernels); the stage its
# kernels must get (None: no forward op of that number is attention).
NODES = [
    ("BmmBackward0", 12, [("k_bwd_pv_a", 3_000), ("k_bwd_pv_b", 2_500)], "pv_matmul"),
    ("SoftmaxBackward0", 11, [("k_bwd_softmax", 1_700)], "softmax"),
    ("BmmBackward0", 10, [("k_bwd_qk_a", 2_900), ("k_bwd_qk_b", 2_600)], "qk_matmul"),
    ("AddmmBackward0", 13, [("k_bwd_linear", 4_100)], None),
]


def _seq(n: int, fwd_thread: int) -> dict:
    return {"Sequence number": n, "Fwd thread id": fwd_thread}


def _training_step(second_thread: bool, flows_to: int | None) -> TraceBuilder:
    """Forward (labelled naive attention, then a linear outside it) on FWD_TID, autograd's nodes for
    it on BWD_TID. ``second_thread``: OTHER_TID's forward ops carry the same sequence numbers (not
    attention). ``flows_to``: the thread the fwdbwd flows start on (None: no flows)."""
    b = TraceBuilder(tid=FWD_TID)
    fwd_ts: dict[tuple[int, int], int] = {}
    call = b.user_annotation("attention:naive", 1_000, None, tid=FWD_TID)
    t = 2_000
    for stage, op, seq, kernel, args in (
        ("qk_matmul", "aten::matmul", 10, "k_fwd_qk", {"Input Dims": QK_DIMS, "Input type": ["float", "float"]}),
        ("softmax", "aten::softmax", 11, "k_fwd_softmax", {}),
        ("pv_matmul", "aten::matmul", 12, "k_fwd_pv", {}),
    ):
        label = b.user_annotation(f"stage:{stage}", t, None, tid=FWD_TID)
        fwd_ts[(FWD_TID, seq)] = t + 300
        res = b.op_with_kernels(op, t + 300, [(kernel, None, 2_000)], tid=FWD_TID, args={**args, **_seq(seq, 0)})
        b.close(label, res.end_ns + 300)
        t = res.end_ns + 1_000
    b.close(call, t)
    fwd_ts[(FWD_TID, 13)] = t + 500
    t = b.op_with_kernels(
        "aten::linear", t + 500, [("k_fwd_linear", None, 3_000)], tid=FWD_TID, args=_seq(13, 0)
    ).end_ns
    if second_thread:  # another thread's forward ops with the same numbers
        for seq in (10, 11, 12, 13):
            fwd_ts[(OTHER_TID, seq)] = 1_500 + 4_000 * seq
            b.op_with_kernels(
                "aten::add", fwd_ts[(OTHER_TID, seq)], [(f"k_other_{seq}", None, 500)], tid=OTHER_TID, args=_seq(seq, 0)
            )
    t = max(t, 80_000) + 10_000
    b.node_spans = []  # (start, end) of each autograd node, relative ns
    for flow_id, (node, seq, kernels, _stage) in enumerate(NODES, start=1):
        outer = b.cpu_op(f"autograd::engine::evaluate_function: {node}", t, None, tid=BWD_TID, args=_seq(seq, 1))
        res = b.op_with_kernels(node, t + 200, [(k, None, d) for k, d in kernels], tid=BWD_TID, args=_seq(seq, 1))
        if flows_to is not None:
            for ph, tid, ts in (("s", flows_to, fwd_ts[(flows_to, seq)]), ("f", BWD_TID, t + 200)):
                ev = {
                    "ph": ph,
                    "id": flow_id,
                    "pid": b.pid,
                    "tid": tid,
                    "ts": b.origin_ns + ts,
                    "cat": "fwdbwd",
                    "name": "fwdbwd",
                }
                b._add({**ev, "bp": "e"} if ph == "f" else ev)
        b.close(outer, res.end_ns + 200)
        b.node_spans.append((t, res.end_ns + 200))
        t = res.end_ns + 2_000
    # Autograd's gradient accumulation: no sequence number, never attention.
    b.op_with_kernels("torch::autograd::AccumulateGrad", t, [("k_accumulate", None, 900)], tid=BWD_TID)
    b.finish()
    return b


def _load(tmp_path, **kw):
    path = tmp_path / "train.json"
    _training_step(**kw).write(path)
    return tracekit.load(path)


def test_a_backward_call_spans_its_nodes_and_stages_shows_backward_time(tmp_path):
    b = _training_step(second_thread=False, flows_to=None)
    path = tmp_path / "train.json"
    b.write(path)
    attention_nodes = [span for span, (_n, _s, _k, stage) in zip(b.node_spans, NODES) if stage]
    with tracekit.load(path) as trace:
        ((ts, cpu_ns),) = trace.sql("SELECT ts_ns, cpu_ns FROM attention_calls WHERE direction = 'backward'").rows()
    assert ts == b.origin_ns + attention_nodes[0][0]
    assert cpu_ns == attention_nodes[-1][1] - attention_nodes[0][0]
    out = CliRunner().invoke(cli, ["stages", "--no-cache", str(path)])
    assert out.exit_code == 0, out.output
    header = out.output.splitlines()[1].split()
    assert "backward_gpu_µs" in header
    rows = [line.split() for line in out.output.split("\n\n")[0].splitlines()[3:] if not line.startswith("(")]
    # (the total row adds the stages up)
    backward_ns = {r[1]: round(float(r[header.index("backward_gpu_µs")]) * 1000) for r in rows if r[1] != "total"}
    want = {stage: sum(d for _k, d in ks) for _n, _s, ks, stage in NODES if stage}
    assert backward_ns == {**want, "other": 0}
    # A trace with no backward shows no such column.
    forward_only = tmp_path / "forward.json"
    forward_builder = TraceBuilder()
    forward_builder.op_with_kernels("aten::mm", 1_000, [("k_mm", None, 2_000)])
    forward_builder.finish()
    forward_builder.write(forward_only)
    out = CliRunner().invoke(cli, ["stages", "--no-cache", str(forward_only)])
    assert out.exit_code == 0 and "backward_gpu" not in out.output, out.output


@pytest.mark.parametrize(
    "second_thread, flows_to",
    [(False, None), (True, FWD_TID), (False, FWD_TID)],
    ids=["one-forward-thread", "flows-pick-the-labelled-thread", "flows-one-thread"],
)
def test_backward_nodes_take_their_forward_ops_stage_and_one_backward_call(tmp_path, second_thread, flows_to):
    with _load(tmp_path, second_thread=second_thread, flows_to=flows_to) as trace:
        stages = {
            name: (stage, source, call_id)
            for name, stage, source, call_id in trace.sql(
                "SELECT name, stage, source, call_id FROM gpu_op_stages WHERE starts_with(name, 'k_')"
            ).rows()
        }
        calls = trace.sql(
            """SELECT call_id, direction, op, impl, call_source, gpu_ops, gpu_ns, batch, heads, seq_q, seq_kv,
                      head_dim, flops
               FROM attention_calls ORDER BY ts_ns"""
        ).pl()
    assert calls["direction"].to_list() == ["forward", "backward"]
    fwd, bwd = calls.row(0, named=True), calls.row(1, named=True)
    for kernel, dur in [k for _n, _s, ks, stage in NODES if stage for k in ks]:
        assert stages[kernel][:2] == (next(s for _n, _q, ks, s in NODES if (kernel, dur) in ks), "backward")
        assert stages[kernel][2] == bwd["call_id"]
    assert stages["k_bwd_linear"] == ("other", "none", None)  # its forward op is outside the call
    assert stages["k_accumulate"] == ("other", "none", None)
    assert stages["k_fwd_qk"] == ("qk_matmul", "label", fwd["call_id"])
    backward_kernels = [k for _n, _s, ks, stage in NODES if stage for k in ks]
    assert bwd["gpu_ops"] == len(backward_kernels)
    assert bwd["gpu_ns"] == sum(d for _k, d in backward_kernels)
    assert (bwd["op"], bwd["impl"], bwd["call_source"]) == ("attention:naive", "naive", "label")
    shape = ("batch", "heads", "seq_q", "seq_kv", "head_dim")
    assert [bwd[c] for c in shape] == [fwd[c] for c in shape] == [2, 4, 64, 64, 32]
    assert fwd["flops"] == FWD_FLOPS and bwd["flops"] == 2 * FWD_FLOPS  # dV, dP, dQ, dK; no recompute


@pytest.mark.parametrize(
    "flows_to", [OTHER_TID, None], ids=["flows-pick-the-other-thread", "two-threads-no-flows-ambiguous"]
)
def test_backward_of_another_or_an_ambiguous_thread_decides_nothing(tmp_path, flows_to):
    with _load(tmp_path, second_thread=True, flows_to=flows_to) as trace:
        backward = trace.sql(
            "SELECT count(*) FROM gpu_op_stages WHERE starts_with(name, 'k_bwd') AND stage <> 'other'"
        ).fetchall()[0][0]
        calls = trace.sql("SELECT direction FROM attention_calls").fetchall()
        decided = trace.sql("SELECT count(*) FROM cpu_stages WHERE source = 'backward'").fetchall()[0][0]
    assert backward == 0 and decided == 0
    assert calls == [("forward",)]


def test_eager_attention_trained_on_cpu_gets_its_backward(tmp_path):
    """A real torch trace (CPU): eager softmax(QK^T/sqrt(d))V, forward and backward, two steps."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    b, h, s, d = 1, 2, 16, 8
    q, k, v = (torch.randn(b, h, s, d, requires_grad=True) for _ in range(3))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            p = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d), dim=-1)
            torch.matmul(p, v).sum().backward()
    path = tmp_path / "eager_train.json"
    prof.export_chrome_trace(str(path))
    with tracekit.load(path) as trace:
        calls = trace.sql(
            "SELECT call_id, direction, impl, batch, heads, seq_q, seq_kv, head_dim, flops FROM attention_calls "
            "ORDER BY ts_ns"
        ).rows()
        nodes = trace.sql(
            """SELECT s.name, c.stage, c.call_id FROM cpu_stages c JOIN cpu_slices s USING (id)
               WHERE c.source = 'backward' AND s.name IN ('SoftmaxBackward0', 'DivBackward0', 'BmmBackward0')
               ORDER BY s.ts_ns"""
        ).rows()
    assert [c[1] for c in calls] == ["forward", "backward", "forward", "backward"]
    for fwd, bwd in (calls[0:2], calls[2:4]):
        assert fwd[2] == bwd[2] == "eager"
        assert fwd[3:8] == bwd[3:8] == (b, h, s, s, d)
        assert bwd[8] == 2 * fwd[8] == 2 * 4 * b * h * s * s * d
    # Autograd runs PV's product first, then the softmax, the scale and QK^T's product.
    per_call = [[(n, st) for n, st, c in nodes if c == call[0]] for call in (calls[1], calls[3])]
    assert (
        per_call[0]
        == per_call[1]
        == [
            ("BmmBackward0", "pv_matmul"),
            ("SoftmaxBackward0", "softmax"),
            ("DivBackward0", "scale"),
            ("BmmBackward0", "qk_matmul"),
        ]
    )


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("modules", [True, False], ids=["with-modules", "ops-only"])
def test_a_trained_gpt2_has_one_backward_call_per_forward_call(tmp_path, impl, modules):
    """A tiny random GPT-2 (transformers, CPU) trained two steps: its eager attention (found by module
    scope or by op order) and its SDPA (the math backend on CPU: separate autograd ops) get one
    backward call per forward call, with the forward's shapes and the core stages in it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    layers, heads, embd, batch, seq = 2, 2, 32, 2, 16
    config = transformers.GPT2Config(
        n_layer=layers, n_head=heads, n_embd=embd, vocab_size=100, n_positions=64, attn_implementation=impl
    )
    model = transformers.GPT2LMHeadModel(config).train()
    ids = torch.randint(0, 100, (batch, seq))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_modules=modules) as prof:
        for _ in range(2):
            model(input_ids=ids, labels=ids).loss.backward()
    path = tmp_path / "gpt2_train.json"
    prof.export_chrome_trace(str(path))
    with tracekit.load(path) as trace:
        calls = trace.sql(
            "SELECT call_id, direction, impl, batch_heads, seq_q, seq_kv, head_dim, flops FROM attention_calls"
        ).pl()
        stages = trace.sql(
            """SELECT c.call_id, list(DISTINCT s.stage ORDER BY s.stage) AS stages
               FROM attention_calls c JOIN cpu_stages s USING (call_id)
               WHERE c.direction = 'backward' AND s.source = 'backward' GROUP BY c.call_id"""
        ).rows()
    forward = calls.filter(calls["direction"] == "forward")
    backward = calls.filter(calls["direction"] == "backward")
    assert forward.height == backward.height == 2 * layers
    want_impl = "eager" if impl == "eager" else "math"
    assert set(calls["impl"]) == {want_impl}
    head_dim = embd // heads
    shape = ["batch_heads", "seq_q", "seq_kv", "head_dim"]
    assert {tuple(r) for r in calls.select(shape).rows()} == {(batch * heads, seq, seq, head_dim)}
    assert set(backward["flops"]) == {2 * f for f in forward["flops"]}
    assert len(stages) == 2 * layers
    for _call, found in stages:
        assert {"qk_matmul", "softmax", "pv_matmul"} <= set(found), found


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_an_unlabelled_llama_training_step_matches_the_labelled_one(tmp_path, attn):
    """A tiny random Llama trained one step on CPU, recorded labelled (capture.label_modules) and
    bare with shapes: bare, the forward call is the block found by op order or around the SDPA op,
    so every autograd node the labelled run puts in a backward call (the projections', RoPE's, the
    views', the attention's) is in one with the same stage."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from collections import Counter

    from synthetic import tiny_llama
    from torch.profiler import ProfilerActivity, profile

    from tracekit import capture

    def nodes(name: str, model) -> tuple[Counter, Counter]:
        ids = torch.randint(0, 64, (2, 16))
        model(ids, use_cache=False).logits.sum().backward()  # warm-up
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            model(ids, use_cache=False).logits.sum().backward()
        path = tmp_path / f"{name}.json"
        prof.export_chrome_trace(str(path))
        with tracekit.load(path) as trace:
            staged = trace.sql(
                """SELECT c.name, s.stage FROM cpu_stages s JOIN cpu_slices c USING (id)
                   WHERE s.call_id IS NOT NULL AND s.source = 'backward'
                     AND c.name LIKE 'autograd::engine::evaluate_function:%'"""
            ).rows()
            calls = trace.sql("SELECT direction FROM attention_calls").rows()
        return Counter(staged), Counter(d for (d,) in calls)

    model = tiny_llama(attn).train()
    handle = capture.label_modules(model)
    labelled, labelled_calls = nodes("labelled", model)
    handle.remove()
    bare, bare_calls = nodes("bare", model)
    assert labelled_calls == bare_calls == Counter({"forward": 2, "backward": 2})
    assert {"qkv_proj", "rope", "out_proj"} <= {stage for _, stage in labelled}
    assert bare == labelled
