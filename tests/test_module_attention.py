"""Attention without labels: module scopes, eager op order and kernel names (issue 10).

Three kinds of inputs, each with its truth from outside the rule tables:

- synthetic GPU traces built here, whose stage per kernel is known by construction;
- the shared real traces with ``nn.Module`` scopes, where a literal table states the
  expected stage of every GPU op launched inside an attention scope, keyed by what the
  trace itself shows (innermost module, launching ops, position around the core);
- CPU recordings of tiny models made here (eager and SDPA attention, an MLP, a CNN).
"""

from __future__ import annotations

import pytest
from synthetic import TraceBuilder, tiny_llama

import tracekit

CORE = ("qkv_proj", "qk_matmul", "softmax", "pv_matmul", "out_proj", "fused_attention")


# --- Synthetic GPU traces: truth by construction -------------------------------------


class _Scoped:
    """A TraceBuilder timeline with nn.Module scopes around ops; records each kernel's true stage."""

    def __init__(self, b: TraceBuilder):
        self.b, self.t, self.truth = b, 10_000, {}

    def op(self, name, kernel, stage, *, args=None, dur=20_000, children=()):
        r = self.b.op_with_kernels(name, self.t, [(kernel, None, dur)], args=args, children=children)
        self.truth[r.gpu[0]["correlation"]] = stage
        self.t = r.end_ns + 1_000
        return r

    def scope(self, name, body):
        start = self.t
        self.t += 500
        body()
        self.t += 500
        self.b.python_function(name, start, self.t - start)
        self.t += 1_000


def _t5_like_layer(s: _Scoped, i: int) -> None:
    """T5LayerSelfAttention > (T5LayerNorm, T5Attention > (q/k/v Linear, eager core, bias, o Linear)), residual."""
    dims4 = {"Input Dims": [[2, 4, 16, 8], [2, 4, 8, 16]], "Input type": ["float", "float"]}
    pv4 = {"Input Dims": [[2, 4, 16, 16], [2, 4, 16, 8]], "Input type": ["float", "float"]}

    def attention():
        for j in range(3):
            s.scope(f"nn.Module: Linear_{3 * i + j}", lambda: s.op("aten::linear", "gemm_qkv", "qkv_proj"))
        s.op("aten::matmul", "bmm_scores", "qk_matmul", args=dims4)
        s.scope(
            "transformers/models/t5/modeling_t5.py(236): compute_bias",
            lambda: (
                s.op("aten::arange", "arange_kernel", "position_bias"),
                s.scope("nn.Module: Embedding_0", lambda: s.op("aten::embedding", "gather_kernel", "position_bias")),
            ),
        )
        s.op("aten::add_", "add_bias_kernel", "mask")
        s.op("aten::softmax", "softmax_warp_forward", "softmax", args={"Input Dims": [[2, 4, 16, 16], [], []]})
        s.op("aten::type_as", "copy_kernel", "layout")
        s.op("aten::matmul", "bmm_context", "pv_matmul", args=pv4)
        s.scope(f"nn.Module: Linear_o{i}", lambda: s.op("aten::linear", "gemm_o", "out_proj"))

    def layer():
        s.scope(
            f"nn.Module: T5LayerNorm_{i}",
            lambda: (s.op("aten::pow", "pow_kernel", "pre_norm"), s.op("aten::rsqrt", "rsqrt_kernel", "pre_norm")),
        )
        s.scope(f"nn.Module: T5Attention_{i}", attention)
        s.op("aten::add", "residual_add_kernel", "out_proj")

    s.scope(f"nn.Module: T5LayerSelfAttention_{i}", layer)


def _serving_like_layer(s: _Scoped, i: int) -> None:
    """Qwen3Attention > QKVParallelLinear, RMSNorm (q/k), RotaryEmbedding, RadixAttention (kv write + kernel), RowParallelLinear."""

    def attention():
        s.scope(f"nn.Module: QKVParallelLinear_{i}", lambda: s.op("aiter::gemm_a16w16", "gemm_kernel", "qkv_proj"))
        for j in range(2):
            s.scope(f"nn.Module: RMSNorm_{2 * i + j}", lambda: s.op("aiter::rmsnorm", "rmsnorm2d_fwd", "qk_norm"))
        s.scope(f"nn.Module: RotaryEmbedding_{i}", lambda: s.op("sgl_kernel::rotary_embedding", "rope_k", "rope"))
        s.scope(
            f"nn.Module: RadixAttention_{i}",
            lambda: (
                s.op("sglang::store_cache", "store_kvcache_kernel", "kv_cache"),
                s.op(
                    "aiter::mha_batch_prefill",
                    "ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<ck_tile::BlockFmhaBatchPrefillPipeline<float>>",
                    "fused_attention",
                ),
            ),
        )
        s.scope(
            f"nn.Module: RowParallelLinear_{i}",
            lambda: (
                s.op("aiter::gemm_a16w16", "gemm_kernel", "out_proj"),
                s.op("vllm::all_reduce", "cross_device_reduce_1stage", "tp_comm"),
            ),
        )

    s.scope(f"nn.Module: Qwen3Attention_{i}", attention)
    # The decoder layer's own norm and MLP, outside attention.
    s.scope(f"nn.Module: RMSNorm_post{i}", lambda: s.op("aiter::rmsnorm", "rmsnorm2d_fwd", "other"))
    s.scope(f"nn.Module: RowParallelLinear_mlp{i}", lambda: s.op("aten::linear", "gemm_mlp", "other"))


@pytest.fixture(scope="module")
def scoped_trace(tmp_path_factory):
    b = TraceBuilder(trace_name="module_scopes")
    s = _Scoped(b)
    for i in range(2):
        _t5_like_layer(s, i)
        _serving_like_layer(s, i)
    # An attention pooling head: a softmax between products that is not attention (an exclusion row).
    s.scope(
        "nn.Module: AttentionPool2d_0",
        lambda: (s.op("aten::softmax", "softmax_warp_forward", "other"), s.op("aten::linear", "gemm_pool", "other")),
    )
    b.finish()
    path = tmp_path_factory.mktemp("scoped") / "module_scopes.json"
    b.write(path)
    trace = tracekit.load(path)
    yield trace, s.truth
    trace.close()


def test_every_gpu_op_in_a_module_scope_gets_its_true_stage(scoped_trace):
    trace, truth = scoped_trace
    got = dict(trace.sql("SELECT g.correlation, s.stage FROM gpu_op_stages s JOIN gpu_ops g USING (id)").rows())
    assert len(truth) == 2 * (14 + 10) + 2
    wrong = {c: (truth[c], got.get(c)) for c in truth if got.get(c) != truth[c]}
    assert not wrong


def test_module_calls_nest_into_one_call_per_outer_module(scoped_trace):
    trace, _ = scoped_trace
    calls = trace.query("attention_calls").to_dicts()
    assert [c["op"] for c in calls] == [
        "nn.Module: T5LayerSelfAttention_0",
        "nn.Module: Qwen3Attention_0",
        "nn.Module: T5LayerSelfAttention_1",
        "nn.Module: Qwen3Attention_1",
    ]
    assert {c["call_source"] for c in calls} == {"module"}
    t5, qwen = calls[0], calls[1]
    assert t5["impl"] == "eager" and qwen["impl"] == "aiter"
    # Shapes of the eager call come from its QK^T product [2, 4, 16, 8] x [2, 4, 8, 16].
    assert (t5["batch"], t5["heads"], t5["seq_q"], t5["seq_kv"], t5["head_dim"], t5["batch_heads"]) == (
        2,
        4,
        16,
        16,
        8,
        8,
    )
    assert t5["flops"] == 4 * 8 * 16 * 16 * 8
    assert t5["gpu_ops"] == 14 and qwen["gpu_ops"] == 8


def test_stage_breakdown_counts_module_decisions(scoped_trace):
    trace, _ = scoped_trace
    rows = {r["stage"]: r for r in trace.query("stage_breakdown").to_dicts()}
    assert rows["pre_norm"]["gpu_by_module"] == rows["pre_norm"]["gpu_ops"] == 4
    assert rows["qk_norm"]["gpu_by_module"] == 4 and rows["rope"]["gpu_by_module"] == 2
    assert rows["qk_matmul"]["gpu_by_op"] == 2 and rows["qk_matmul"]["gpu_by_module"] == 0


def test_attention_kernel_beats_a_kv_cache_name_rule(tmp_path):
    """ck_tile's prefill kernel says PagedKVCache in its name; without ops (a graph replay) the name decides."""
    b = TraceBuilder(trace_name="names_only")
    names = {
        "ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<ck_tile::BlockFmhaBatchPrefillPipeline<float>>": (
            "fused_attention"
        ),
        "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>(StoreKVCacheParams)": "kv_cache",
        "sage_fwd": "fused_attention",
        # Mangled names (as ROCm reports them) are matched demangled and without their template arguments.
        "_ZN7ck_tile6kentryINS_38FmhaBatchPrefillWithPagedKVCacheKernelIfEEEEvT_": "fused_attention",
        "_ZN3foo11gemm_kernelIN10flash_attn6ParamsEEEvT_": "other",
        "triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10": "layout",
        # Generic inductor kernels outside a call are not attention.
        "triton_per_fused__to_copy_addmm_mean_pow_rsqrt_view_7": "other",
        # FlexAttention compiled, forward, backward and decoding, and cuDNN SDPA's backward helpers:
        # names as an H200 printed them (torch 2.11).
        "triton_tem_fused_flex_attention_0": "fused_attention",
        "triton_tem_fused_flex_attention_backward_1": "fused_attention",
        "triton_per_fused_flex_attention_backward_0": "fused_attention",
        "triton_tem_fused__to_copy_flex_attention_ones_slice_sort_sum_transpose_zeros_2": "fused_attention",
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, void*, "
        "unsigned int, unsigned int, unsigned int, unsigned int)": "fused_attention",
        "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int)": (
            "fused_attention"
        ),
        # Triton decode attention (SGLang / vLLM / LightLLM), by its kernels' own names.
        "_fwd_grouped_kernel_stage1": "fused_attention",
        "_fwd_kernel_stage1": "fused_attention",
        "_fwd_kernel_stage2": "fused_attention",
        "_fwd_kernel_flash_decode_stage1": "fused_attention",
        # Their extend kernel's name says nothing outside an attention call.
        "_fwd_kernel": "other",
        # FlashInfer: attention kernels whose names say KV cache, MLA, and the merge of split-KV states;
        # its KV-cache append stays kv_cache.
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<KTraits, Params>(Params)": "fused_attention",
        "void flashinfer::PODWithKVCacheTensorKernel<KTraits_P, KTraits_D, Params>(Params, Params)": (
            "fused_attention"
        ),
        "void flashinfer::mla::BatchMLAPagedAttentionKernel<KTraits, Params>(Params)": "fused_attention",
        "void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<KTraits, Params>(Params)": ("fused_attention"),
        "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, half, half, int>(...)": (
            "fused_attention"
        ),
        "void flashinfer::AppendPagedKVCacheKernel<128u, 8u, half, int>(...)": "kv_cache",
        "void vllm::merge_attn_states_kernel<__nv_bfloat16, 128u>(...)": "fused_attention",
        # XQA (TensorRT-LLM / FlashInfer) exports its kernel as kernel_mha; TensorRT-LLM's FMHA and MMHA.
        "kernel_mha": "fused_attention",
        "fmha_v2_flash_attention_fp16_64_128_S_qkv_128_sm90_kernel": "fused_attention",
        "void tensorrt_llm::kernels::mmha::masked_multihead_attention_kernel<half, 128>(...)": "fused_attention",
    }
    t = 5_000
    # Each on a stream of its own: these are name rules, and neighbours on one stream would be read
    # as one attention block (tracekit/attribution/kernel_blocks.py; its tests are test_kernel_blocks.py).
    for stream, name in enumerate(names, start=10):
        b.orphan_kernel(name, t, 10_000, stream=stream)
        t += 12_000
    b.finish()
    b.write(tmp_path / "t.json")
    with tracekit.load(tmp_path / "t.json") as trace:
        got = dict(trace.sql("SELECT name, stage FROM gpu_op_stages").rows())
        impls = dict(trace.sql("SELECT op, impl FROM attention_calls").rows())
    assert got == names
    # Each attention kernel outside a call is a call of its own, named by its library.
    assert impls["kernel_mha"] == "xqa"
    assert impls["fmha_v2_flash_attention_fp16_64_128_S_qkv_128_sm90_kernel"] == "trtllm"
    flashinfer = {n: impls[n] for n in impls if "flashinfer::" in n and "AppendPaged" not in n}
    assert len(flashinfer) == 5 and set(flashinfer.values()) == {"flashinfer"}
    assert "void flashinfer::AppendPagedKVCacheKernel<128u, 8u, half, int>(...)" not in impls


@pytest.mark.parametrize(
    "op, impl",
    [
        ("trtllm::attention_inplace", "trtllm"),
        ("trtllm::attention", "trtllm"),
        ("xformers::efficient_attention_forward_cutlass", "xformers"),
        ("xformers_flash::flash_fwd", "xformers"),
        ("xformers_flash3::flash_fwd", "xformers"),
    ],
)
def test_serving_and_library_attention_ops_are_calls_by_construction(tmp_path, op, impl):
    """An attention op of TensorRT-LLM or xformers is one call whatever its kernel is named; TRT-LLM's
    capability query (attention_supports_nvfp4_output) is not attention."""
    b = TraceBuilder(trace_name="ops")
    b.op_with_kernels(op, 1_000, [("some_vendor_kernel", None, 8_000), ("another_kernel", None, 2_000)])
    b.op_with_kernels("trtllm::attention_supports_nvfp4_output", 30_000, [])
    b.finish()
    b.write(tmp_path / "t.json")
    with tracekit.load(tmp_path / "t.json") as trace:
        calls = trace.query("attention_calls").to_dicts()
        stages = trace.sql("SELECT DISTINCT stage FROM gpu_op_stages").rows()
    assert [(c["op"], c["impl"], c["gpu_ops"], c["gpu_ns"]) for c in calls] == [(op, impl, 2, 10_000)]
    assert stages == [("fused_attention",)]


def test_inductor_kernels_inside_a_module_call_are_read_by_their_fused_ops(tmp_path):
    b = TraceBuilder(trace_name="inductor_in_module")
    s = _Scoped(b)
    truth = {}

    def launch_only(kernel, stage):
        # Inductor launches from Python: a runtime call with no CPU op around it.
        corr = b.launch("cudaLaunchKernel", s.t, 3_000)
        b.kernel(kernel, s.t + 4_000, 8_000, corr)
        truth[kernel] = stage
        s.t += 5_000

    def body():
        launch_only("triton_tem_fused_addmm_0", "qkv_proj")
        launch_only("triton_per_fused__to_copy_mean_mul_pow_rsqrt_1", "qk_norm")
        launch_only("triton_poi_fused_cat_cos_mul_neg_sin_stack_2", "rope")
        launch_only("triton_poi_fused_clone_transpose_view_3", "layout")
        s.op("aten::_scaled_dot_product_flash_attention", "flash_fwd_kernel", "fused_attention")
        truth["flash_fwd_kernel"] = "fused_attention"
        launch_only("_fwd_kernel", "fused_attention")  # SGLang's Triton extend attention, by its place
        launch_only("triton_tem_fused_addmm_4", "out_proj")

    s.scope("nn.Module: FluxAttention_0", body)
    launch_only("triton_per_fused__to_copy_mean_mul_pow_rsqrt_5", "other")  # the MLP's norm, outside
    b.finish()
    b.write(tmp_path / "t.json")
    with tracekit.load(tmp_path / "t.json") as trace:
        got = dict(trace.sql("SELECT name, stage FROM gpu_op_stages").rows())
        calls = trace.query("attention_calls").to_dicts()
    assert got == truth
    assert len(calls) == 1 and calls[0]["op"] == "nn.Module: FluxAttention_0"


# --- Shared real traces: the expected stage of every GPU op in an attention scope -----


def _sdpa_layer(attention_cls: str) -> dict:
    """An encoder's SDPA layer: the QKV Linear, flash SDPA inside attention_cls, the output Linear."""
    sdpa = ("aten::scaled_dot_product_attention", "aten::_flash_attention_forward")
    return {
        ("Linear", "aten::linear", "aten::addmm", "pre", False): "qkv_proj",
        (attention_cls, *sdpa, "core", False): "fused_attention",
        ("Linear", "aten::linear", "aten::addmm", "post", False): "out_proj",
    }


# Per GPU op launched inside an nn.Module *Attention scope: (innermost module class, the
# outermost op of its launch, the innermost op, where it runs relative to the scope's core
# launch -- the softmax, SDPA or attention op --, inside T5's compute_bias frame) -> stage.
# Written from the model code (transformers' T5, CLIP, ViT, BERT, diffusers' Attention,
# vLLM's gpt-oss), not from the rule tables.
EXPECTED = {
    "tracelens/mi300_xdit_flux1_aiter-sage_t5-clip-eager.json.gz": {
        # diffusers' VAE Attention: group norm, to_q/k/v, SDPA, to_out, residual add, rescale.
        ("GroupNorm", "aiter::_groupnorm_run", "aiter::_groupnorm_run", "pre", False): "pre_norm",
        ("Linear", "aten::linear", "aten::mm", "pre", False): "qkv_proj",
        ("Linear", "aten::linear", "aten::add_", "pre", False): "qkv_proj",
        ("Attention", "aten::scaled_dot_product_attention", "aten::_flash_attention_forward", "core", False): (
            "fused_attention"
        ),
        ("Linear", "aten::linear", "aten::addmm", "post", False): "out_proj",
        ("Attention", "aten::add", "aten::add", "post", False): "out_proj",
        ("Attention", "aten::div", "aten::div", "post", False): "out_proj",
        # CLIP: q/k/v projections, SDPA (with its fill_ helper), out_proj.
        ("Linear", "aten::linear", "aten::addmm", "pre", False): "qkv_proj",
        ("CLIPAttention", "aten::scaled_dot_product_attention", "aten::_flash_attention_forward", "core", False): (
            "fused_attention"
        ),
        ("CLIPAttention", "aten::scaled_dot_product_attention", "aten::fill_", "pre", False): "fused_attention",
        # T5: layer norm, q/k/v, scores, position bias, bias add, softmax in fp32, PV, o, residual.
        ("T5LayerNorm", "aten::to", "aten::copy_", "pre", False): "pre_norm",
        ("T5LayerNorm", "aten::pow", "aten::pow", "pre", False): "pre_norm",
        ("T5LayerNorm", "aten::mean", "aten::mean", "pre", False): "pre_norm",
        ("T5LayerNorm", "aten::add", "aten::add", "pre", False): "pre_norm",
        ("T5LayerNorm", "aten::rsqrt", "aten::rsqrt", "pre", False): "pre_norm",
        ("T5LayerNorm", "aten::mul", "aten::mul", "pre", False): "pre_norm",
        ("T5Attention", "aten::matmul", "aten::bmm", "pre", False): "qk_matmul",
        ("T5Attention", "aten::add_", "aten::add_", "pre", False): "mask",
        ("T5Attention", "aten::to", "aten::copy_", "pre", False): "layout",
        ("T5Attention", "aten::softmax", "aten::_softmax", "core", False): "softmax",
        ("T5Attention", "aten::type_as", "aten::copy_", "post", False): "layout",
        ("T5Attention", "aten::matmul", "aten::bmm", "post", False): "pv_matmul",
        ("T5Attention", "aten::contiguous", "aten::copy_", "post", False): "layout",
        ("Linear", "aten::linear", "aten::mm", "post", False): "out_proj",
        ("T5LayerSelfAttention", "aten::add", "aten::add", "post", False): "out_proj",
        **{
            ("T5Attention", op, inner, "pre", True): "position_bias"
            for op, inner in [
                ("aten::arange", "aten::arange"),
                ("aten::sub", "aten::sub"),
                ("aten::to", "aten::copy_"),
                ("aten::mul", "aten::mul"),
                ("aten::add", "aten::add"),
                ("aten::add_", "aten::add_"),
                ("aten::abs", "aten::abs"),
                ("aten::lt", "aten::lt"),
                ("aten::div", "aten::div"),
                ("aten::log", "aten::log"),
                ("aten::full_like", "aten::fill_"),
                ("aten::min", "aten::minimum"),
                ("aten::where", "aten::where"),
                ("aten::gt", "aten::gt"),
            ]
        },
        ("Embedding", "aten::embedding", "aten::gather", "pre", True): "position_bias",
    },
    "tracelens/b200_vllm_eager_paged-fp8.json.gz": {
        ("QKVParallelLinear", "aten::linear", "aten::addmm", "pre", False): "qkv_proj",
        ("YaRNScalingRotaryEmbedding", "_C::rotary_embedding", "_C::rotary_embedding", "pre", False): "rope",
        ("OAIAttention", "aten::contiguous", "aten::copy_", "pre", False): "layout",
        ("QuantFP8", "_C::static_scaled_fp8_quant", "_C::static_scaled_fp8_quant", "pre", False): "layout",
        (
            "Attention",
            "vllm::unified_attention_with_output",
            "_C_cache_ops::reshape_and_cache_flash",
            "pre",
            False,
        ): "kv_cache",
        (
            "Attention",
            "vllm::unified_attention_with_output",
            "vllm::unified_attention_with_output",
            "core",
            False,
        ): "fused_attention",
        ("RowParallelLinear", "aten::linear", "aten::addmm", "post", False): "out_proj",
        # The tensor-parallel all-reduce of o_proj's partial sums, with its copies into and out of the
        # symmetric-memory buffer.
        ("RowParallelLinear", "vllm::all_reduce", "aten::copy_", "post", False): "tp_comm",
        ("RowParallelLinear", "vllm::all_reduce", "symm_mem::multimem_all_reduce_", "post", False): "tp_comm",
    },
    "tracelens/mi300_falconsai_vit_sdpa_modules.json.gz": _sdpa_layer("ViTSdpaSelfAttention"),
    "tracelens/h100_bert-small_sdpa-flash.json.gz": {
        **_sdpa_layer("BertSdpaSelfAttention"),
        # BertSelfOutput: dense, residual add, post-norm.
        ("BertSelfOutput", "aten::add", "aten::add", "post", False): "out_proj",
        ("LayerNorm", "aten::layer_norm", "aten::native_layer_norm", "post", False): "out_proj",
    },
}
EXPECTED["tracelens/mi300_bert-small_sdpa-flash.json.gz"] = EXPECTED["tracelens/h100_bert-small_sdpa-flash.json.gz"]

# GPU ops per attention scope, keyed as above, computed from python_functions, runtime
# calls and the op stack only (no rule table).
SCOPED_OPS = """
WITH m AS (
    SELECT id, pid, tid, ts_ns, end_ns, regexp_extract(name, '^nn\\.Module: ([A-Za-z0-9_]+?)(_[0-9]+)?$', 1) AS cls
    FROM python_functions WHERE name LIKE 'nn.Module: %'
),
a AS (SELECT * FROM m WHERE cls LIKE '%Attention'),
bias AS (SELECT pid, tid, ts_ns, end_ns FROM python_functions WHERE name LIKE '%: compute_bias'),
g AS (
    SELECT g.id, g.dur_ns, g.launch_ts_ns AS t, r.pid, r.tid, g.cpu_op_name, g.top_op_name
    FROM gpu_ops g JOIN runtime_calls r ON r.id = g.launch_id
),
x AS (
    SELECT g.*,
           (SELECT arg_min(a.id, a.ts_ns) FROM a
            WHERE a.pid = g.pid AND a.tid = g.tid AND a.ts_ns <= g.t AND a.end_ns >= g.t) AS scope,
           (SELECT arg_max(m.cls, m.ts_ns) FROM m
            WHERE m.pid = g.pid AND m.tid = g.tid AND m.ts_ns <= g.t AND m.end_ns >= g.t) AS inner_mod,
           EXISTS (SELECT 1 FROM bias b WHERE b.pid = g.pid AND b.tid = g.tid AND b.ts_ns <= g.t AND b.end_ns >= g.t)
               AS in_bias
    FROM g
),
y AS (
    SELECT x.*, min(t) FILTER (WHERE cpu_op_name IN ('aten::_softmax', 'aten::_flash_attention_forward',
                                                     'vllm::unified_attention_with_output'))
                    OVER (PARTITION BY scope) AS core_t
    FROM x WHERE scope IS NOT NULL
)
SELECT y.id, y.dur_ns, y.inner_mod, y.top_op_name, y.cpu_op_name,
       CASE WHEN t < core_t THEN 'pre' WHEN t = core_t THEN 'core' ELSE 'post' END AS phase, y.in_bias, s.stage
FROM y JOIN gpu_op_stages s USING (id)
"""


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_every_gpu_op_in_an_attention_scope_has_its_expected_stage(load_shared, rel):
    trace = load_shared(rel)
    rows = trace.sql(SCOPED_OPS).to_dicts()
    assert rows, "the trace has GPU ops inside attention scopes"
    expected = EXPECTED[rel]
    unknown = {
        (r["inner_mod"], r["top_op_name"], r["cpu_op_name"], r["phase"], r["in_bias"])
        for r in rows
        if (r["inner_mod"], r["top_op_name"], r["cpu_op_name"], r["phase"], r["in_bias"]) not in expected
    }
    assert not unknown, "GPU ops this test has no expectation for"
    wrong = {}
    for r in rows:
        want = expected[(r["inner_mod"], r["top_op_name"], r["cpu_op_name"], r["phase"], r["in_bias"])]
        if r["stage"] != want:
            wrong[(r["inner_mod"], r["cpu_op_name"], r["phase"])] = (want, r["stage"])
    assert not wrong
    # The bar: <= 5 % of scoped GPU time is other; core stages right for >= 95 % of their time.
    total = sum(r["dur_ns"] for r in rows)
    other = sum(r["dur_ns"] for r in rows if r["stage"] == "other")
    assert other <= 0.05 * total
    core = [
        r
        for r in rows
        if expected[(r["inner_mod"], r["top_op_name"], r["cpu_op_name"], r["phase"], r["in_bias"])] in CORE
    ]
    right = sum(
        r["dur_ns"]
        for r in core
        if r["stage"] == expected[(r["inner_mod"], r["top_op_name"], r["cpu_op_name"], r["phase"], r["in_bias"])]
    )
    assert right >= 0.95 * sum(r["dur_ns"] for r in core)


def test_xdit_t5_attention_is_found_with_its_shapes(load_shared):
    trace = load_shared("tracelens/mi300_xdit_flux1_aiter-sage_t5-clip-eager.json.gz")
    calls = trace.query("attention_calls").to_dicts()
    t5 = [c for c in calls if c["op"].startswith("nn.Module: T5LayerSelfAttention_")]
    assert len(t5) == 24 and {c["impl"] for c in t5} == {"eager"}
    # T5-XXL: 64 heads of 64 over 512 tokens; from the first aten::matmul of each call.
    assert {(c["batch"], c["heads"], c["seq_q"], c["seq_kv"], c["head_dim"]) for c in t5} == {(1, 64, 512, 512, 64)}
    clip = [c for c in calls if c["op"].startswith("nn.Module: CLIPAttention_")]
    assert len(clip) == 12 and {c["impl"] for c in clip} == {"flash"}
    # The compiled transformer has no scopes: its SageAttention kernels are calls by name.
    sage = [c for c in calls if c["call_source"] == "kernel"]
    assert len(sage) == 228 and {c["impl"] for c in sage} == {"sage"}


def test_sglang_capture_pass_attention_modules_on_the_cpu_side(load_shared):
    trace = load_shared("tracelens/mi300_sglang_qwen3-8b_capture_modules.json.gz")
    calls = trace.query("attention_calls").to_dicts()
    assert len(calls) == 36 and {c["op"].split("_")[0] for c in calls} == {"nn.Module: Qwen3Attention"}
    assert {c["impl"] for c in calls} == {"paged"}  # sglang_profiler::attention_paged_attention_ragged
    stages = dict(
        trace.sql(
            """SELECT c.name, any_value(s.stage) FROM cpu_stages s JOIN cpu_slices c USING (id)
               WHERE s.call_id IS NOT NULL AND c.kind = 'cpu_op' AND c.name IN (
                   'aiter::gemm_a16w16', 'sglang_profiler::utils_apply_qk_norm_487', 'sgl_kernel::rotary_embedding',
                   'sglang::store_cache', 'sglang_profiler::attention_paged_attention_ragged_100')
               GROUP BY c.name HAVING count(DISTINCT s.stage) = 1"""
        ).rows()
    )
    assert stages == {
        "sglang_profiler::utils_apply_qk_norm_487": "qk_norm",
        "sgl_kernel::rotary_embedding": "rope",
        "sglang::store_cache": "kv_cache",
        "sglang_profiler::attention_paged_attention_ragged_100": "fused_attention",
    }
    # aiter's GEMM runs both projections: qkv_proj in QKVParallelLinear, out_proj in RowParallelLinear.
    gemm = trace.sql(
        """SELECT s.stage, count(*) FROM cpu_stages s JOIN cpu_slices c USING (id)
           WHERE c.name = 'aiter::gemm_a16w16' AND s.call_id IS NOT NULL GROUP BY ALL ORDER BY 1"""
    ).rows()
    assert gemm == [("out_proj", 36), ("qkv_proj", 36)]


# --- CPU recordings of tiny models --------------------------------------------------

torch = pytest.importorskip("torch")


def _record(tmp_path, name, model, inputs, *, scopes: bool, shapes: bool = True):
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        model(inputs)  # warm-up
        with profile(
            activities=[ProfilerActivity.CPU], record_shapes=shapes, with_modules=scopes, with_stack=scopes
        ) as prof:
            model(inputs)
    path = tmp_path / f"{name}.json"
    prof.export_chrome_trace(str(path))
    return tracekit.load(path)


def _llama(impl: str):
    pytest.importorskip("transformers")
    return tiny_llama(impl)


@pytest.mark.parametrize("scopes", [False, True], ids=["no_scopes", "with_modules"])
def test_eager_llama_calls_are_found(tmp_path, scopes):
    with _record(tmp_path, "llama", _llama("eager"), torch.randint(0, 64, (2, 16)), scopes=scopes) as trace:
        calls = trace.query("attention_calls").to_dicts()
        stages = {r["stage"] for r in trace.query("stage_breakdown").to_dicts() if r["cpu_ops"]}
    assert len(calls) == 2 and {c["impl"] for c in calls} == {"eager"}
    assert {c["call_source"] for c in calls} == {"module" if scopes else "eager"}
    assert {(c["batch"], c["heads"], c["seq_q"], c["seq_kv"], c["head_dim"]) for c in calls} == {(2, 4, 16, 16, 8)}
    assert {"qk_matmul", "softmax", "pv_matmul"} <= stages
    if scopes:  # the module scope also brings the projections and RoPE into the call
        assert {"qkv_proj", "out_proj", "rope"} <= stages


def test_sdpa_llama_module_calls_hold_the_projections(tmp_path):
    with _record(tmp_path, "llama_sdpa", _llama("sdpa"), torch.randint(0, 64, (2, 16)), scopes=True) as trace:
        calls = trace.query("attention_calls").to_dicts()
        linear = trace.sql(
            """SELECT s.stage, count(*) FROM cpu_stages s JOIN cpu_slices c USING (id)
               WHERE c.name = 'aten::linear' GROUP BY ALL ORDER BY 1"""
        ).rows()
    assert [c["op"] for c in calls] == ["nn.Module: LlamaAttention_0", "nn.Module: LlamaAttention_1"]
    # 2 layers: q/k/v then o in each attention; the MLP's 3 linears and the LM head stay other.
    assert linear == [("other", 2 * 3 + 1), ("out_proj", 2), ("qkv_proj", 2 * 3)]


class _BmmAttention(torch.nn.Module):
    """Eager attention on 3-D [B*H, S, D] tensors (torch.bmm), as older models write it."""

    def __init__(self, hidden=32, heads=4):
        super().__init__()
        self.heads, self.qkv, self.o = heads, torch.nn.Linear(hidden, 3 * hidden), torch.nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)

        def split(t):
            return t.reshape(b, s, self.heads, h // self.heads).transpose(1, 2).reshape(b * self.heads, s, -1)

        q, k, v = split(q), split(k), split(v)
        scores = torch.bmm(q, k.transpose(1, 2)) / (h // self.heads) ** 0.5
        out = torch.bmm(scores.softmax(-1), v)
        return self.o(out.reshape(b, self.heads, s, -1).transpose(1, 2).reshape(b, s, h))


@pytest.mark.parametrize("shapes", [True, False], ids=["record_shapes", "no_shapes"])
def test_bmm_attention_reports_what_its_dims_tell(tmp_path, shapes):
    model = torch.nn.Sequential(_BmmAttention(), _BmmAttention()).eval()
    with _record(tmp_path, "bmm", model, torch.randn(3, 10, 32), scopes=False, shapes=shapes) as trace:
        calls = trace.query("attention_calls").to_dicts()
    assert len(calls) == 2 and {c["call_source"] for c in calls} == {"eager"}
    if shapes:
        # [B*H, S, D] does not tell B from H: batch and heads stay unknown, their product is known.
        assert {(c["batch"], c["heads"], c["batch_heads"], c["seq_q"], c["head_dim"]) for c in calls} == {
            (None, None, 12, 10, 8)
        }
        assert {c["flops"] for c in calls} == {4 * 12 * 10 * 10 * 8}


@pytest.mark.parametrize("shapes", [True, False], ids=["record_shapes", "no_shapes"])
def test_bloom_baddbmm_attention_is_found_by_op_order(tmp_path, shapes):
    """BLOOM scores with baddbmm (alibi + Q @ K^T; its operands follow the bias), then softmax, then
    bmm: eager attention found without scopes, with the shapes its 3-D operands tell."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.BloomModel(transformers.BloomConfig(vocab_size=64, hidden_size=32, n_layer=2, n_head=4))
    ids = torch.randint(0, 64, (2, 16))
    with _record(tmp_path, "bloom", model.eval(), ids, scopes=False, shapes=shapes) as trace:
        calls = trace.query("attention_calls").to_dicts()
        stages = trace.sql(
            """SELECT c.name, list(DISTINCT s.stage) FROM cpu_stages s JOIN cpu_slices c USING (id)
               WHERE s.call_id IS NOT NULL AND c.name IN ('aten::baddbmm', 'aten::softmax', 'aten::bmm')
               GROUP BY 1 ORDER BY 1"""
        ).rows()
    assert [c["op"] for c in calls] == ["aten::baddbmm > aten::softmax > aten::bmm"] * 2
    assert stages == [("aten::baddbmm", ["qk_matmul"]), ("aten::bmm", ["pv_matmul"]), ("aten::softmax", ["softmax"])]
    if shapes:
        assert {(c["batch_heads"], c["seq_q"], c["seq_kv"], c["head_dim"]) for c in calls} == {(2 * 4, 16, 16, 8)}


class _EinsumAttention(torch.nn.Module):
    def forward(self, x):
        q = x.view(2, 16, 4, 8).transpose(1, 2)
        scores = torch.einsum("bhid,bhjd->bhij", q, q) * 8**-0.5
        return torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), q)


def test_einsum_attention_is_found_by_op_order(tmp_path):
    with _record(tmp_path, "einsum", _EinsumAttention(), torch.randn(2, 16, 32), scopes=False) as trace:
        calls = trace.query("attention_calls").to_dicts()
        stages = trace.sql(
            """SELECT c.name, s.stage FROM cpu_stages s JOIN cpu_slices c USING (id)
               WHERE s.call_id IS NOT NULL AND c.depth = 0 ORDER BY c.ts_ns"""
        ).rows()
    assert [(c["op"], c["impl"]) for c in calls] == [("aten::einsum > aten::softmax > aten::einsum", "eager")]
    # (its head dim unread, the block takes in q's reshapes right before it, as before a fused op)
    assert stages == [
        ("aten::view", "layout"),
        ("aten::transpose", "layout"),
        ("aten::einsum", "qk_matmul"),
        ("aten::mul", "scale"),
        ("aten::softmax", "softmax"),
        ("aten::einsum", "pv_matmul"),
    ]


class _Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def forward(self, x):
        return torch.matmul(self.net(x).softmax(-1), torch.eye(10))  # a product after the softmax, no QK^T before


class _Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.conv(x).mean((2, 3))).softmax(-1)


@pytest.mark.parametrize(
    "name, model, inputs",
    [("mlp", _Mlp, (4, 32)), ("cnn", _Cnn, (2, 3, 16, 16))],
)
@pytest.mark.parametrize("scopes", [False, True], ids=["no_scopes", "with_modules"])
def test_no_attention_is_found_in_models_without_it(tmp_path, name, model, inputs, scopes):
    with _record(tmp_path, name, model().eval(), torch.randn(*inputs), scopes=scopes) as trace:
        assert trace.query("attention_calls").height == 0
        assert trace.sql("SELECT count(*) FROM cpu_stages WHERE stage <> 'other'").rows() == [(0,)]


@pytest.mark.parametrize(
    ("op", "is_causal_at", "kernel"),
    [
        ("aten::_scaled_dot_product_flash_attention_backward", 11, "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"),
        ("aten::_scaled_dot_product_efficient_attention_backward", 11, "fmha_cutlassB_bf16_aligned_64x64_k64_sm80"),
        ("aten::_scaled_dot_product_cudnn_attention_backward", 14, "cudnn_generated_fort_native_sdpa_sm90_bprop"),
    ],
)
def test_fused_backward_is_a_call_with_its_own_shapes_by_construction(tmp_path, op, is_causal_at, kernel):
    """A fused SDPA backward on autograd's thread: one call, direction backward, its shapes from the
    query and key after grad_out (grouped-query: 8 query heads, 2 key/value heads; cross lengths 128
    and 256), causal from its own is_causal argument, FLOPs 2.5 times a forward's."""
    b = TraceBuilder(trace_name="backward")
    q, k = [2, 8, 128, 64], [2, 2, 256, 64]
    concrete = [""] * 16
    concrete[is_causal_at] = "True"
    dims = [q, q, k, k, q] + [[]] * 11
    args = {"Input Dims": dims, "Concrete Inputs": concrete, "Input type": ["c10::BFloat16"] * 5 + [""] * 11}
    ext = b.cpu_op(op, 1_000, 20_000, tid=2, args=args)
    corr = b.launch("cudaLaunchKernel", 2_000, 3_000, tid=2, external_id=ext)
    b.kernel(kernel, 6_000, 10_000, corr)
    b.finish()
    b.write(tmp_path / "t.json")
    with tracekit.load(tmp_path / "t.json") as trace:
        calls = trace.query("attention_calls").to_dicts()
    assert len(calls) == 1
    c = calls[0]
    assert (c["op"], c["direction"], c["call_source"], c["gpu_ops"], c["attention_kernel_ns"]) == (
        op,
        "backward",
        "op",
        1,
        10_000,
    )
    shape = (c["batch"], c["heads"], c["kv_heads"], c["seq_q"], c["seq_kv"], c["head_dim"], c["causal"])
    assert shape == (2, 8, 2, 128, 256, 64, True)
    assert c["flops"] == int(4 * 2 * 8 * 128 * 256 * 64 * 0.5 * 2.5)
