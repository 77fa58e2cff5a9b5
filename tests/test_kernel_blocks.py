"""Attention blocks read from a stream's kernel order (tracekit/attribution/kernel_blocks.py): graph replays
and compiled regions, where no CPU op says which kernels are the attention layer's.

Synthetic traces whose ground truth is known by construction (each kernel's role is given where
it is placed), and the shared SGLang decode trace (one hipGraphLaunch per step)."""

from __future__ import annotations

import pytest
from synthetic import TraceBuilder

import tracekit
from tracekit.attribution import kernel_blocks

GEMM_QKV = "Cijk_Alik_Bljk_BBS_MT64x32x256"
GEMM_O = "Cijk_Alik_Bljk_BBS_MT16x32x512"
GEMM_UP = "Cijk_Alik_Bljk_BBS_MT256x32x64"
GEMM_DOWN = "Cijk_Alik_Bljk_BBS_MT32x32x256"
NORM = "add_rmsnorm_quant_kernel_256"
QK_NORM = "add_rmsnorm_quant_kernel_64"
COPY = "elementwise_kernel_direct_copy"


def _layer(attention=("paged_attention_ll4mi_QKV_kernel", "paged_attention_ll4mi_reduce_kernel"), pre=None, post=()):
    """One decoder layer of a graph-replayed decode step: (kernel name, expected stage) in stream order."""
    if pre is None:
        pre = [(COPY, "layout"), (QK_NORM, "qk_norm"), (COPY, "layout"), (QK_NORM, "qk_norm"),
               ("rotary_embedding_kernel", "rope"), ("store_kvcache", "kv_cache")]  # fmt: skip
    return [
        (NORM, "other"),  # the layer's input norm: outside the attention block
        (GEMM_QKV, "qkv_proj"),
        *pre,
        *[(a, "fused_attention") for a in attention],
        *post,
        (GEMM_O, "out_proj"),
        (NORM, "other"),
        (GEMM_UP, "other"),
        ("act_and_mul_kernel", "other"),
        (GEMM_DOWN, "other"),
    ]


def _load(tmp_path, layers, name="graph.json.gz", steps=2):
    """``steps`` graph launches of ``layers`` (lists of (kernel, expected stage)): the trace, and per
    step the expected stage of each of its kernels in order."""
    b = TraceBuilder()
    expected = []
    for step in range(steps):
        kernels = [k for layer in layers for k in layer]
        b.graph_launch(10_000 + step * 1_000_000, [(k[0], None, 2_000, *k[2:]) for k in kernels])
        expected += [k[1] for k in kernels]
    b.finish()
    b.write(tmp_path / name)
    return tracekit.load(tmp_path / name), expected


def _rows(trace):
    return trace.sql(
        """SELECT g.name, s.stage, s.source, s.call_id FROM gpu_ops g JOIN gpu_op_stages s USING (id)
           ORDER BY g.ts_ns, g.id"""
    ).rows()


def test_graph_layer_block_by_construction(tmp_path):
    trace, expected = _load(tmp_path, [_layer(), _layer()])
    rows = _rows(trace)
    assert [r[1] for r in rows] == expected
    # One call per layer and step: the paged kernel and its reduction are one attention, and every
    # kernel of the block carries that call.
    calls = trace.query("attention_calls").to_dicts()
    assert len(calls) == 4 and {c["gpu_ops"] for c in calls} == {10} and {c["call_source"] for c in calls} == {"kernel"}
    assert {c["op"] for c in calls} == {"paged_attention_ll4mi_QKV_kernel"}
    in_block = [r for r in rows if r[1] != "other"]
    assert all(r[3] is not None for r in in_block)
    # What the kernel rules name keeps source kernel; the GEMMs, norms and copies are the sequence's.
    sources = {(r[0], r[2]) for r in in_block}
    assert ("rotary_embedding_kernel", "kernel") in sources and ("store_kvcache", "kernel") in sources
    assert {s for n, s in sources if n in (GEMM_QKV, GEMM_O, QK_NORM, COPY)} == {kernel_blocks.SOURCE}
    (seq,) = [r for r in trace.query("stage_breakdown").to_dicts() if r["stage"] == "qkv_proj"]
    assert seq["gpu_by_sequence"] == 4 and seq["gpu_ns"] == 4 * 2_000


def test_separate_q_k_v_gemms_and_a_tp_all_reduce(tmp_path):
    layer = [
        (NORM, "other"),
        (GEMM_QKV, "qkv_proj"),
        (GEMM_QKV, "qkv_proj"),
        (GEMM_QKV, "qkv_proj"),
        ("rotary_embedding_kernel", "rope"),
        ("flash_fwd_kernel", "fused_attention"),
        (COPY, "layout"),
        (GEMM_O, "out_proj"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "tp_comm"),
        (NORM, "other"),
        (GEMM_UP, "other"),
        ("ncclDevKernel_AllGather_RING_LL", "other"),
    ]
    trace, expected = _load(tmp_path, [layer])
    assert [r[1] for r in _rows(trace)] == expected


def test_no_gemm_within_reach_leaves_that_side_alone(tmp_path):
    far = [(COPY, "other")] * (kernel_blocks.PRE_REACH + 1)
    layer = [(NORM, "other"), (GEMM_QKV, "other"), *far, ("flash_fwd_kernel", "fused_attention"),
             *[(COPY, "other")] * (kernel_blocks.POST_REACH + 1), (GEMM_O, "other")]  # fmt: skip
    trace, expected = _load(tmp_path, [layer])
    assert [r[1] for r in _rows(trace)] == expected
    # At the reach exactly, both sides widen.
    near = [(NORM, "other"), (GEMM_QKV, "qkv_proj"), *[(COPY, "layout")] * kernel_blocks.PRE_REACH,
            ("flash_fwd_kernel", "fused_attention"), *[(COPY, "layout")] * kernel_blocks.POST_REACH,
            (GEMM_O, "out_proj")]  # fmt: skip
    trace, expected = _load(tmp_path, [near], name="near.json.gz")
    assert [r[1] for r in _rows(trace)] == expected


def test_walk_stops_at_a_copy_a_collective_and_a_backward_kernel(tmp_path):
    layer = [
        (GEMM_QKV, "other"),
        ("Memcpy DtoD (Device -> Device)", "other", {"bytes": 4096}),  # a copy: the walk back stops here
        ("rotary_embedding_kernel", "rope"),
        ("flash_fwd_kernel", "fused_attention"),
        ("ncclDevKernel_AllGather_RING_LL", "other"),  # a collective: the walk forward stops
        (GEMM_O, "other"),
        (GEMM_QKV, "other"),  # backward: dO's GEMMs before, dQKV's after; neither is widened
        ("flash_bwd_dq_dk_dv_loop_kernel", "fused_attention"),
        (GEMM_O, "other"),
    ]
    trace, expected = _load(tmp_path, [layer], steps=1)
    rows = _rows(trace)
    assert [r[1] for r in rows] == expected
    # No side widened: only the attention kernels are in calls (the rope kernel keeps its stage, not a call).
    assert [r[3] is not None for r in rows] == [s == "fused_attention" for s in expected]


def test_a_kernel_of_a_cpu_call_is_not_taken(tmp_path):
    """A kernel its launching op decided (here an SDPA op's call) stays that op's: the walk stops at it."""
    b = TraceBuilder()
    b.op_with_kernels("aten::_scaled_dot_product_flash_attention", 1_000, [("flash_fwd_kernel", None, 2_000)])
    b.graph_launch(20_000, [(COPY, None, 1_000), ("flash_fwd_kernel", None, 2_000), (GEMM_O, None, 2_000)])
    b.finish()
    b.write(tmp_path / "mixed.json.gz")
    rows = _rows(tracekit.load(tmp_path / "mixed.json.gz"))
    assert [(r[1], r[2]) for r in rows] == [
        ("fused_attention", "op"),
        ("other", "none"),  # no GEMM before it short of the op's kernel: not taken
        ("fused_attention", "kernel"),
        ("out_proj", kernel_blocks.SOURCE),
    ]
    assert rows[0][3] != rows[2][3] == rows[3][3]


def test_sglang_hip_graph_decode_blocks(load_shared):
    trace = load_shared("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz")
    rows = trace.sql(
        """SELECT s.stage, s.source, count(*) AS n, count(DISTINCT s.call_id) AS calls
           FROM gpu_op_stages s JOIN gpu_ops g USING (id) WHERE g.name LIKE 'Cijk%' GROUP BY ALL ORDER BY ALL"""
    ).rows()
    # 36 layers: each layer's fused QKV GEMM and o_proj GEMM join its call; the MLP's GEMMs (and
    # the LM head) stay other.
    assert rows == [("other", "none", 73, 0), ("out_proj", "sequence", 36, 36), ("qkv_proj", "sequence", 36, 36)]
    calls = trace.query("attention_calls").to_dicts()
    # The paged kernel and its split-KV reduction are one call per layer.
    assert len(calls) == 36 and all(c["gpu_ops"] == 10 for c in calls)
    qk = trace.sql(
        "SELECT DISTINCT s.stage FROM gpu_op_stages s JOIN gpu_ops g USING (id) WHERE g.name LIKE '%rmsnorm_quant%Li64%'"
    )["stage"]
    assert qk.to_list() == ["qk_norm"]


def test_adjacent_attention_kernels_merge_only_within_one_implementation(tmp_path):
    layer = [
        (GEMM_QKV, "qkv_proj"),
        ("flash_fwd_splitkv_kernel", "fused_attention"),
        ("flash_fwd_splitkv_combine_kernel", "fused_attention"),  # flash's split-KV combine: the same call
        ("sage_fwd", "fused_attention"),  # another library's kernel right after: a call of its own
        (GEMM_O, "out_proj"),
    ]
    trace, expected = _load(tmp_path, [layer], steps=1)
    rows = _rows(trace)
    assert [r[1] for r in rows] == expected
    calls = [r[3] for r in rows]
    assert calls[0] == calls[1] == calls[2] != calls[3] == calls[4]
    assert sorted(c["impl"] for c in trace.query("attention_calls").to_dicts()) == ["flash", "sage"]


def _piecewise(tmp_path, name, graph: bool, graph_after: bool | None = None):
    """vLLM's piecewise CUDA graphs by construction: the attention op runs eagerly between two graph
    replays (``graph``; ``graph_after`` for the second when it differs) or two plain launches that
    hold the projections and the MLP."""
    b = TraceBuilder()
    before = [(NORM, None, 2_000), (GEMM_QKV, None, 3_000), ("rotary_embedding_kernel", None, 1_000)]
    after = [(GEMM_O, None, 2_000), (NORM, None, 2_000), (GEMM_UP, None, 4_000), (GEMM_DOWN, None, 4_000)]
    if graph:
        b.graph_launch(1_000, before)
    else:
        b.op_with_kernels("aten::linear", 1_000, before)
    b.op_with_kernels(
        "vllm::unified_attention_with_output",
        40_000,
        [("reshape_and_cache_flash_kernel", None, 1_000), ("flash_fwd_splitkv_kernel", None, 5_000)],
    )
    if graph if graph_after is None else graph_after:
        b.graph_launch(80_000, after)
    else:
        b.op_with_kernels("aten::linear", 80_000, after)
    b.finish()
    b.write(tmp_path / name)
    trace = tracekit.load(tmp_path / name)
    return trace, _rows(trace)


def test_piecewise_graphs_widen_an_eager_attention_op(tmp_path):
    trace, rows = _piecewise(tmp_path, "piecewise.json.gz", graph=True)
    assert [(r[0], r[1]) for r in rows] == [
        (NORM, "other"),
        (GEMM_QKV, "qkv_proj"),
        ("rotary_embedding_kernel", "rope"),
        # Launched by the attention op itself, whose rule decides all under it.
        ("reshape_and_cache_flash_kernel", "fused_attention"),
        ("flash_fwd_splitkv_kernel", "fused_attention"),
        (GEMM_O, "out_proj"),
        (NORM, "other"),
        (GEMM_UP, "other"),
        (GEMM_DOWN, "other"),
    ]
    (call,) = trace.query("attention_calls").to_dicts()
    assert (call["call_source"], call["impl"], call["gpu_ops"]) == ("op", "paged", 5)
    assert {r[3] for r in rows if r[1] != "other"} == {call["call_id"]}
    # The op's own kernels keep their source; the graph's are the sequence's.
    assert [r[2] for r in rows[1:6]] == [kernel_blocks.SOURCE, "kernel", "op", "op", kernel_blocks.SOURCE]


def test_eager_neighbours_of_an_attention_op_are_not_taken(tmp_path):
    """Without graphs the ops around the call are on the CPU too: the block search by ops
    (attribution/eager: here by the op names, the trace has no shapes) decides them, not the kernel
    order: the linear before the op is its q projection, the one after its output projection, each
    with every kernel it launched (op rules decide for everything under them)."""
    _, rows = _piecewise(tmp_path, "eager.json.gz", graph=False)
    assert [(r[1], r[2]) for r in rows] == [
        *[("qkv_proj", "op")] * 3,
        *[("fused_attention", "op")] * 2,
        *[("out_proj", "op")] * 4,
    ]
    # A graph replay before the op and plain launches after it: the replay's side widens by the kernel
    # order (the ops gave the call no q projection), the other side is the ops'.
    _, rows = _piecewise(tmp_path, "half.json.gz", graph=True, graph_after=False)
    assert [(r[1], r[2]) for r in rows] == [
        ("other", "none"),
        ("qkv_proj", kernel_blocks.SOURCE),
        ("rope", "kernel"),
        *[("fused_attention", "op")] * 2,
        *[("out_proj", "op")] * 4,
    ]


def test_projections_apart_by_inductor_norms_by_construction(tmp_path):
    """FLUX's joint block as torch.compile ran it: each q/k projection's bias add is fused into the
    next q/k-norm kernel, so the GEMMs of the two token streams alternate with norm kernels."""
    img, txt = "Cijk_Alik_Bljk_BBS_MT64x96x128", "Cijk_Alik_Bljk_BBS_MT64x48x256"
    stat, apply = "triton_per_fused__to_copy_addmm_mean_pow_view_7", "triton_poi_fused_cat_mean_mul_pow_rsqrt_view_9"
    rope = "triton_poi_fused_cat_mul_neg_stack_sub_transpose_13"
    block = [
        (img, "other"),  # the modulation GEMM before the block's input norm
        ("triton_red_fused_add_addmm_mul_native_layer_norm_split_27", "other"),  # the input norm: the walk stops
        *[(img, "qkv_proj"), (stat, "qk_norm"), (txt, "qkv_proj"), (stat, "qk_norm"), (apply, "qk_norm")] * 2,
        (rope, "rope"),
        (img, "qkv_proj"),  # v: the adjacent group nearest the core
        (txt, "qkv_proj"),
        ("sage_quant_kernel", "layout"),
        ("sage_fwd", "fused_attention"),
        ("triton_poi_fused_clone_transpose_21", "layout"),
        (txt, "out_proj"),
    ]
    trace, expected = _load(tmp_path, [block], steps=1)
    assert [r[1] for r in _rows(trace)] == expected
    # A GEMM of another kernel than the group's ends the walk back: it is not a projection of this block.
    # A GEMM of another kernel than the group's ends the walk back: not a projection of this block
    # (and the norm kernel after it, before the first projection, is not the block's either).
    trace, expected = _load(tmp_path, [[(GEMM_DOWN, "other"), (stat, "other"), *block[2:]]], name="o.json.gz", steps=1)
    assert [r[1] for r in _rows(trace)] == expected


@pytest.mark.parametrize(
    "rope",
    [
        "triton_poi_fused_add_cat_index_select_mul_sub_5",  # vLLM's forward_native (neox halves), compiled
        "triton_poi_fused_add_mul_stack_view_4",  # GPT-J's interleaved pairs, stacked
        "triton_poi_fused_cat_mul_slice_sub_6",  # x1 * cos - x2 * sin, then cat
    ],
)
def test_compiled_rotary_without_a_negation_is_rope_by_construction(tmp_path, rope):
    """Inductor names a kernel by its ops, sorted: a rotary embedding written as products and a sum or
    difference of the halves (no neg) is still a product, a sum and a cat or stack in one kernel, and inside
    the call it is rope, not layout or other; a norm kernel that also concatenates stays a norm."""
    img, txt = "Cijk_Alik_Bljk_BBS_MT64x96x128", "Cijk_Alik_Bljk_BBS_MT64x48x256"
    stat, apply = "triton_per_fused__to_copy_addmm_mean_pow_view_7", "triton_poi_fused_add_cat_mean_mul_pow_rsqrt_9"
    block = [
        (img, "other"),
        ("triton_red_fused_add_addmm_mul_native_layer_norm_split_27", "other"),
        *[(img, "qkv_proj"), (stat, "qk_norm"), (txt, "qkv_proj"), (stat, "qk_norm"), (apply, "qk_norm")] * 2,
        (rope, "rope"),
        (img, "qkv_proj"),
        (txt, "qkv_proj"),
        ("sage_fwd", "fused_attention"),
        ("triton_poi_fused_clone_transpose_21", "layout"),
        (txt, "out_proj"),
    ]
    trace, expected = _load(tmp_path, [block], steps=1)
    assert [r[1] for r in _rows(trace)] == expected
