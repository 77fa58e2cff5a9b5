"""Tensor-parallel communication inside an attention block: the stage ``tp_comm``, never ``out_proj``.

Inputs: synthetic traces whose truth is by construction (each GPU op's expected stage is given where it is
placed, each kernel name's bucket is listed), and the shared B200 vLLM trace (tensor parallel, eager), whose
numbers before the stage existed are literals here.
"""

from __future__ import annotations

import re

import pytest
from synthetic import ALL_REDUCE, TraceBuilder

import tracekit

# Collective kernels as serving stacks and libraries name them: each is communication.
COLLECTIVES = [
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
    "__nv_bfloat16*, int, int)",
    "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
    "__nv_bfloat16*, int, int)",
    "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, "
    "sglang::Signal*, __nv_bfloat16*, int, int)",
    # torch symmetric memory (the shared B200 trace's), one-shot and two-shot.
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, "
    "unsigned int**, unsigned long, unsigned long)",
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>(c10::BFloat16**, unsigned long, "
    "unsigned long, c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)",
    "void c10d::symmetric_memory::two_shot_all_reduce_kernel<c10::BFloat16, 8>(c10::BFloat16**, unsigned long, "
    "unsigned long, unsigned int**, unsigned long, unsigned long)",
    "ncclKernel_AllReduce_RING_LL_Sum_bfloat16(ncclWorkElem)",
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_Generic_2(ncclDevKernelArgsStorage<4096ul>)",  # RCCL's and NCCL's generic kernel
    "HcclAllReduce_f32_kernel",
    "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8, 4, true>("
    "tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams)",
    "void tensorrt_llm::kernels::lamport_initialize_kernel<float>(float*, unsigned long)",
    "void quickreduce::allreduce_prototype_twoshot<quickreduce::CodecFP, false>(__half const*, __half*, unsigned int, "
    "int, int, unsigned char**, unsigned int, unsigned int)",
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*)",
]

# Reductions, gathers and scatters that compute: never communication.
NOT_COLLECTIVES = [
    ALL_REDUCE,  # at::native::reduce_kernel of aten::all
    "reduce_kernel",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, "
    "false>(cublasLt::cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*)",
    "void cub::DeviceReduceKernel<cub::DeviceReducePolicy<float, unsigned int, cub::Sum>::Policy600, float*, "
    "float*, unsigned int, cub::Sum>(float*, float*, unsigned int, cub::GridEvenShare<unsigned int>, cub::Sum)",
    "void cub::DeviceReduceSingleTileKernel<cub::DeviceReducePolicy<float, int, cub::Sum>::Policy600, float*, "
    "float*, int, cub::Sum, float>(float*, float*, int, cub::Sum, float)",
    "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)",
    "void at::native::_scatter_gather_elementwise_kernel<128, 8, at::native::_cuda_scatter_gather_internal_kernel"
    "<true, float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, long, long, long, "
    "at::native::ReduceAdd const&)::{lambda(int)#1}>(int, at::native::_cuda_scatter_gather_internal_kernel<true, "
    "float>::operator()<at::native::ReduceAdd>(at::TensorIterator&, long, long, long, at::native::ReduceAdd "
    "const&)::{lambda(int)#1})",
    # Inductor names a kernel after the aten ops it fuses: a copy fused with a collective's input is a copy.
    "triton_poi_fused_all_gather_into_tensor_copy_0",
]

GEMM_QKV = "Cijk_Alik_Bljk_BBS_MT64x32x256"
GEMM_O = "Cijk_Alik_Bljk_BBS_MT16x32x512"
ATTENTION = "ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel<ck_tile::BlockFmhaBatchPrefillPipeline<float>>"
COPY = "Memcpy DtoD (Device -> Device)"
SP_GATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


class _Layers:
    """A TraceBuilder timeline of ops (each launching GPU ops) inside nn.Module scopes; records each GPU op's
    true stage by its correlation id."""

    def __init__(self, b: TraceBuilder):
        self.b, self.t, self.truth = b, 10_000, {}

    def op(self, name, gpu_ops):
        """``gpu_ops``: (GPU op name, its true stage)."""
        specs = [(g, None, 3_000, {"bytes": 4096} if g.startswith(("Memcpy", "Memset")) else {}) for g, _ in gpu_ops]
        r = self.b.op_with_kernels(name, self.t, specs)
        for gpu, (_, stage) in zip(r.gpu, gpu_ops, strict=True):
            self.truth[gpu["correlation"]] = stage
        self.t = r.end_ns + 1_000

    def scope(self, name, body):
        start = self.t
        self.t += 500
        body()
        self.t += 500
        self.b.python_function(f"nn.Module: {name}", start, self.t - start)
        self.t += 1_000


def _tp_layer(s: _Layers, i: int, collective: str, reduce_op: str) -> None:
    """A vLLM-like attention layer whose RowParallelLinear holds o_proj's GEMM, a copy of its own and the
    all-reduce of its partial sums (launched by ``reduce_op``); the MLP's all-reduce after it is not attention."""
    if reduce_op == "vllm::all_reduce":  # vLLM's symmetric-memory path: copy in, all-reduce, copy out
        reduce = [(COPY, "tp_comm"), (collective, "tp_comm"), (COPY, "tp_comm")]
    else:  # an op no rule names: the kernel's name says communication
        reduce = [(collective, "tp_comm")]

    def attention():
        def qkv_proj():
            # Sequence parallelism gathers the tokens before the QKV GEMM (an op no rule names: by its kernel).
            s.op("my_sp::gather_tokens", [(SP_GATHER, "tp_comm")])
            s.op("aten::linear", [(GEMM_QKV, "qkv_proj")])

        s.scope(f"QKVParallelLinear_{i}", qkv_proj)
        s.scope(f"RadixAttention_{i}", lambda: s.op("aiter::mha_batch_prefill", [(ATTENTION, "fused_attention")]))

        def o_proj():
            # cuBLAS's split-K reduction and workspace memset are the GEMM's own kernels.
            s.op(
                "aten::linear",
                [("Memset (Device)", "out_proj"), (GEMM_O, "out_proj"), (NOT_COLLECTIVES[2], "out_proj")],
            )
            s.op("aten::copy_", [(COPY, "layout")])  # a copy in the output block that no collective made
            s.op(reduce_op, reduce)

        s.scope(f"RowParallelLinear_{i}", o_proj)

    s.scope(f"Qwen3Attention_{i}", attention)
    s.scope(f"RowParallelLinear_mlp{i}", lambda: s.op(reduce_op, [(g, "other") for g, _ in reduce]))


@pytest.fixture(scope="module")
def tp_trace(tmp_path_factory):
    b = TraceBuilder(trace_name="tp_layers_by_construction")
    s = _Layers(b)
    for i, collective in enumerate(COLLECTIVES):
        _tp_layer(s, 2 * i, collective, "vllm::all_reduce")
        _tp_layer(s, 2 * i + 1, collective, "my_tp::sum_partials")
    for name in NOT_COLLECTIVES:
        s.op("my::compute", [(name, "other")])
    b.finish()
    path = tmp_path_factory.mktemp("tp") / "tp_layers_by_construction.json.gz"
    b.write(path)
    trace = tracekit.load(path)
    yield trace, s.truth
    trace.close()


def test_collective_kernel_names_are_communication_and_reductions_are_not(tp_trace):
    trace, _ = tp_trace
    bucket = dict(trace.sql("SELECT DISTINCT name, gpu_op_category(kind, name) FROM gpu_ops").fetchall())
    assert {n: bucket[n] for n in COLLECTIVES} == dict.fromkeys(COLLECTIVES, "communication")
    assert {n: bucket[n] for n in NOT_COLLECTIVES} == dict.fromkeys(NOT_COLLECTIVES, "computation")
    # The collective_kernels view (the cluster queries, clock alignment) reads the same definition.
    said = dict(trace.sql("SELECT DISTINCT name, collective FROM collective_kernels").fetchall())
    assert set(said) == set(COLLECTIVES)
    # What each says it is (no record_param_comms op here): the collective in its name, else its own name.
    assert [said[n] for n in COLLECTIVES] == [
        "cross_device_reduce_1stage", "cross_device_reduce_2stage", "cross_device_reduce_1stage",
        "allreduce", "allreduce", "allreduce", "allreduce", "reducescatter", "allgather", "generic", "allreduce",
        "allreduce", "lamport_initialize_kernel", "allreduce", "dispatch",
    ]  # fmt: skip


def test_every_gpu_op_of_a_tp_layer_gets_its_true_stage(tp_trace):
    trace, truth = tp_trace
    got = dict(trace.sql("SELECT g.correlation, s.stage FROM gpu_op_stages s JOIN gpu_ops g USING (id)").rows())
    wrong = {c: (truth[c], got.get(c)) for c in truth if got.get(c) != truth[c]}
    assert not wrong
    # Each layer is one call holding its all-reduce; the MLP's all-reduce is in none.
    calls = trace.query("attention_calls").to_dicts()
    assert len(calls) == 2 * len(COLLECTIVES)
    # the gather, qkv GEMM, attention kernel, o_proj's 3 kernels, the copy, the all-reduce (and vllm::all_reduce's
    # 2 copies)
    assert sorted({c["gpu_ops"] for c in calls}) == [8, 10]
    # The CPU side agrees: the all-reduce op of a layer is tp_comm, the MLP's is other.
    cpu = trace.sql(
        """SELECT s.stage, s.call_id IS NOT NULL AS in_call, count(*) FROM cpu_stages s JOIN cpu_slices c USING (id)
           WHERE c.name = 'vllm::all_reduce' GROUP BY ALL ORDER BY ALL"""
    ).rows()
    assert cpu == [("other", False, len(COLLECTIVES)), ("tp_comm", True, len(COLLECTIVES))]


@pytest.mark.parametrize(
    "collective",
    COLLECTIVES,
    ids=[re.sub(r"^void |[<(].*$", "", n.replace("(anonymous namespace)", "anon")) for n in COLLECTIVES],
)
def test_the_kernel_order_walk_gives_its_all_reduce_tp_comm(tmp_path, collective):
    """A graph-replayed layer: the collective right after the output GEMM is the block's, tp_comm."""
    layer = [
        (GEMM_QKV, "qkv_proj"),
        ("paged_attention_ll4mi_QKV_kernel", "fused_attention"),
        (GEMM_O, "out_proj"),
        (collective, "tp_comm"),
        (GEMM_QKV, "other"),  # the MLP's up projection
    ]
    b = TraceBuilder()
    b.graph_launch(10_000, [(k, None, 2_000) for k, _ in layer])
    b.finish()
    b.write(tmp_path / "graph_tp_by_construction.json.gz")
    with tracekit.load(tmp_path / "graph_tp_by_construction.json.gz") as trace:
        rows = trace.sql("SELECT s.stage FROM gpu_op_stages s JOIN gpu_ops g USING (id) ORDER BY g.ts_ns").rows()
    assert [r[0] for r in rows] == [stage for _, stage in layer]


def test_b200_vllm_out_proj_is_its_gemm_and_the_all_reduce_is_tp_comm(load_shared):
    trace = load_shared("tracelens/b200_vllm_eager_paged-fp8.json.gz")
    rows = trace.sql(
        """SELECT s.stage, s.source, g.kind, kernel_base(g.name) AS name, count(*), sum(g.dur_ns)::BIGINT
           FROM gpu_op_stages s JOIN gpu_ops g USING (id) WHERE s.stage IN ('out_proj', 'tp_comm', 'layout')
           GROUP BY ALL ORDER BY ALL"""
    ).rows()
    # Before tp_comm, out_proj held all of the GEMMs', all-reduce kernels' and copies' rows (144, 1,664,473 ns).
    assert rows == [
        ("layout", "module", "kernel", "vllm::scaled_fp8_quant_kernel_strided", 36, 97_313),
        ("layout", "op", "kernel", "at::native::direct_copy_kernel_cuda", 36, 127_387),
        ("out_proj", "module", "kernel", "nvjet_tst_144x128_64x6_2x1_v_bz_bias_TNN", 36, 227_615),
        ("tp_comm", "op", "kernel", "multimem_all_reduce_kernel", 36, 901_246),
        ("tp_comm", "op", "memcpy", "Memcpy DtoD ", 72, 535_612),
    ]
    # The all-reduce's 72 copies are the collective's, not a hidden clone an in-place op would avoid: the
    # memcpy_in_attention finding (it listed them before) has no row.
    assert trace.query("findings.memcpy_in_attention").to_dicts() == []
    # The attention calls are the same 36 with the same GPU ops and times.
    assert trace.sql(
        "SELECT count(*), sum(gpu_ops), sum(gpu_ns), sum(attention_kernel_ns) FROM attention_calls"
    ).rows() == [(36, 360, 2_958_188, 485_821)]
    # gpu_breakdown: the 73 multimem all-reduce kernels (the 36 above, 37 outside attention) now count as
    # communication beside the one NCCL all-gather (21,953 ns before), moved out of computation; busy time and
    # memcpy are as before, and the copies stay memcpy whatever their stage.
    got = {r["category"]: r["time_ns"] for r in trace.query("gpu_breakdown").to_dicts()}
    comm = trace.sql(
        "SELECT count(*), sum(dur_ns) FROM gpu_ops WHERE gpu_op_category(kind, name) = 'communication'"
    ).rows()
    assert comm == [(74, 2_141_501)]
    assert got["communication"] == 2_141_501
    assert got["computation"] + got["communication"] == 10_771_685 + 21_953
    assert (got["memcpy"], got["busy"]) == (802_844, 11_596_482)


def test_b200_vllm_nested_collectives_are_decided_by_the_outermost_every_run(load_shared):
    """vLLM's ``vllm::all_reduce`` holds torch's ``symm_mem::multimem_all_reduce_``: both are collective ops,
    and the outermost decides every slice under it (attribution/slice_stages). Their positions differ by a
    few units; a key offset by 2^62 (one aggregate for ops and modules) made the two keys equal in a DOUBLE, so
    the decider changed from build to build (the inner op won most runs); the collective is now an aggregate
    of its own over the positions themselves. Truth by construction: each slice's decider is
    its outermost ancestor-or-self that is a tp_comm op."""
    trace = load_shared("tracelens/b200_vllm_eager_paged-fp8.json.gz")
    rows = trace.sql(
        """SELECT s.name, o.name AS decider, count(*)
           FROM cpu_stage_decisions d JOIN cpu_slices s ON s.id = d.id JOIN cpu_slices o ON o.id = d.decider_id
           WHERE d.stage = 'tp_comm' AND s.name LIKE '%all_reduce%' GROUP BY ALL ORDER BY ALL"""
    ).rows()
    # The inner op sits directly under the outer one in every layer (the outer op is a top-level op).
    assert rows == [
        ("symm_mem::multimem_all_reduce_", "vllm::all_reduce", 36),
        ("vllm::all_reduce", "vllm::all_reduce", 36),
    ]
