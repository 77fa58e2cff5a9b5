"""Kernel names behind launch wrappers: kernel rules see the inner name (the kernel_base macro), FlashAttention 3's
kernels are fused attention with impl flash3, its helper kernels join the adjacent attention kernel's call, and
names that render badly (an enable_if return type, a mangled name the demangler cannot read) show their function.

Synthetic traces whose truth is by construction: graph replays (no CPU op decides a kernel, so kernel names do),
each kernel's expected stage and call written beside it. The kernel names are spelled as CUPTI demangles them.
"""

from __future__ import annotations

import pytest
from synthetic import TraceBuilder

import tracekit
from tracekit.common import names
from tracekit.present.values import format_unit

FA3_FWD = (
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
    "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, "
    "128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, true, true, false, false, true, true, "
    "false, false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, "
    "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, true, "
    "false, false>, flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true> > > >"
    "(flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2>, flash::CollectiveEpilogueFwd<>, "
    "flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true> >::Params)"
)
FA3_FWD_PLAIN = "cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2>, int> >(int)"
FA3_BWD = "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<int, int> > >(int)"
FA3_SCHEDULER = (
    "flash::prepare_varlen_num_blocks_kernel(int, int, int, int const*, int const*, int const*, int const*, "
    "int const*, int const*, int, int, int, int, int, cutlass::FastDivmod, cutlass::FastDivmod, int*, int*, int*, "
    "int*, bool)"
)
FA3_COMBINE = "void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8> >, 7, 256, 1, false>>(int)"
FA3_BWD_PRE = "void cutlass::device_kernel<flash::FlashAttnBwdPreprocess<cute::tuple<cute::C<64> >, float>>(int)"
FA3_BWD_POST = "void cutlass::device_kernel<flash::FlashAttnBwdPostprocessConvertdQ<int, float>>(int)"
ENABLE_IF = (
    "std::enable_if<(((8)>(0)))&&(_typeConvert<c10::BFloat16>::exists), void>::type "
    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*, "
    "float, int, int)"
)
# Mangled names no demangler reads whole: the enable_if above with an expression cpp_demangle and c++filt refuse,
# and FA3's kernel symbol cut short.
MANGLED_ENABLE_IF = (
    "_ZN4vllm25fused_add_rms_norm_kernelIN3c108BFloat16ELi8EEENSt9enable_ifIXaagtT0_Li0Esr12_typeConvertIT_EE6exists"
    "EvE4typeEPS5_S8_PKS5_fii"
)
MANGLED_FA3_CUT = "_ZN5flash16FlashAttnFwdSm90INS_25CollectiveMainloopFwdSm90ILi2EN4cute5tupleIJNS3_1CILi1"

GEMM_QKV = "nvjet_tst_192x192_64x4_1x2_h_bz_coopA_NTN"
GEMM_O = "nvjet_tst_128x256_64x4_2x1_v_bz_coopB_NTN"
GEMM_UP = "nvjet_tst_256x128_64x4_2x1_v_bz_coopA_NTN"
NORM = "void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>(c10::BFloat16*, c10::BFloat16 const*, long, int, float)"
ROPE = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*, int)"
COPY = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int)"

# Wrapped and decorated names -> (kernel_base, stage, impl) by the shipped kernel rules (graph replays: no op).
NAMES = {
    FA3_FWD: ("flash::FlashAttnFwdSm90", "fused_attention", "flash3"),
    FA3_FWD_PLAIN: ("flash::FlashAttnFwdSm90", "fused_attention", "flash3"),
    FA3_BWD: ("flash::FlashAttnBwdSm90", "fused_attention", "flash3"),
    "void ck_tile::kentry<64, 1, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVS<ck_tile::BlockGemmARegBSmemCRegV2"
    "<float> > > >(ck_tile::FmhaFwdKernel<int>::FmhaFwdBatchModeKargs)": (
        "ck_tile::FmhaFwdKernel",
        "fused_attention",
        "aiter",
    ),
    COPY: ("at::native::FillFunctor", "other", None),
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >"
    "(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1}>(int)": (
        "at::native::CUDAFunctor_add",
        "other",
        None,
    ),
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
    "unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, "
    "float, 4>)": ("at::native::MeanOps", "other", None),
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous "
    "namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)": (
        "at::native::cunn_SoftMaxForward",
        "other",
        None,
    ),
    ENABLE_IF: ("vllm::fused_add_rms_norm_kernel", "other", None),
    # An anchored rule (^triton_...) matches behind a return type too.
    "void triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10(float*, int)": (
        "triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10",
        "layout",
        None,
    ),
    "void (anonymous namespace)::store_kvcache<2048l, 4, false, long>(StoreKVCacheParams)": (
        "store_kvcache",
        "kv_cache",
        None,
    ),
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(cutlass_80_wmma_"
    "tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)": (
        "cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8",
        "other",
        None,
    ),
    # Rules see a mangled name demangled; one the demangler cannot read as its function's name.
    MANGLED_FA3_CUT: (MANGLED_FA3_CUT, "fused_attention", "flash3"),
}


MEMCPY = ("Memcpy DtoD (Device -> Device)", None, 1_000, {"bytes": 4096})


def _write(tmp_path, name, steps, apart=False):
    """One graph replay per step, each a list of kernel names (running 2 µs) or GPU op specs. ``apart``: a memcpy
    after each kernel, where the kernel-order walk stops (so no GEMM becomes an attention block's projection)."""
    b = TraceBuilder(trace_name=name)
    for i, kernels in enumerate(steps):
        specs = [(k, None, 2_000) if isinstance(k, str) else k for k in kernels]
        b.graph_launch(10_000 + i * 1_000_000, [x for k in specs for x in ((k, MEMCPY) if apart else (k,))])
    b.finish()
    b.write(tmp_path / f"{name}.json.gz")
    return tracekit.load(tmp_path / f"{name}.json.gz")


def _rows(trace):
    """(name, stage, call_id, attention_kernel, kernel_impl) of every GPU op in stream order."""
    return trace.rows(
        "SELECT g.name, s.stage, s.call_id, s.attention_kernel, s.kernel_impl "
        "FROM gpu_ops g JOIN gpu_op_stages s USING (id) ORDER BY g.ts_ns, g.id"
    )


def test_kernel_rules_see_the_inner_name_of_a_wrapper(tmp_path):
    trace = _write(tmp_path, "wrappers", [list(NAMES)], apart=True)
    base = dict(trace.rows("SELECT name, kernel_base(name) FROM gpu_ops"))
    got = {n: (base[n], stage, impl) for n, stage, _call, _att, impl in _rows(trace) if n != MEMCPY[0]}
    want = {n: v for n, v in NAMES.items() if n != MANGLED_FA3_CUT}
    assert {n: v for n, v in got.items() if n != MANGLED_FA3_CUT} == want
    # kernel_base reads the raw (mangled) name; the rules read it demangled: flash::FlashAttnFwdSm90.
    assert got[MANGLED_FA3_CUT][1:] == ("fused_attention", "flash3")
    assert names.demangle(MANGLED_FA3_CUT) == "flash::FlashAttnFwdSm90"


def _layer(attention):
    """One decoder layer of a graph-replayed step: (kernel, expected stage), the attention kernels in the middle."""
    return [
        (NORM, "other"),
        (GEMM_QKV, "qkv_proj"),
        (ROPE, "rope"),
        *[(k, "fused_attention") for k in attention],
        (GEMM_O, "out_proj"),
        (NORM, "other"),
        (GEMM_UP, "other"),
    ]


def test_fa3_layers_are_one_call_each_with_their_scheduler_and_combine(tmp_path):
    """N layers -> N calls: FA3's scheduler before its kernel and the split-KV combine after it join its call."""
    layers = [
        _layer([FA3_SCHEDULER, FA3_FWD]),
        _layer([FA3_SCHEDULER, FA3_FWD, FA3_COMBINE]),
        _layer([FA3_FWD]),
    ]
    steps = 2
    trace = _write(tmp_path, "fa3_layers", [[k for layer in layers for k, _ in layer]] * steps)
    rows = _rows(trace)
    assert [r[1] for r in rows] == [s for layer in layers for _, s in layer] * steps
    calls = trace.query("attention_calls").to_dicts()
    assert len(calls) == len(layers) * steps
    assert {(c["impl"], c["op"], c["call_source"]) for c in calls} == {("flash3", FA3_FWD, "kernel")}
    # Each call holds its block (QKV GEMM, rotary, its attention kernels, o_proj GEMM); the helpers are
    # attention kernels of the FA3 kernel's call, never calls of their own.
    by_call: dict[int, list[str]] = {}
    for name, _stage, call, attention, _impl in rows:
        if call is not None:
            by_call.setdefault(call, []).append(name)
        if name in (FA3_SCHEDULER, FA3_COMBINE):
            assert call is not None and attention, name
    assert sorted(len(v) for v in by_call.values()) == [4, 4, 5, 5, 6, 6]
    assert all(v.count(FA3_FWD) == 1 for v in by_call.values())
    kernel_ns = sorted(c["attention_kernel_ns"] for c in calls)
    assert kernel_ns == [2_000, 2_000, 4_000, 4_000, 6_000, 6_000]
    ids = {c["call_id"] for c in calls}
    assert all(trace.rows(f"SELECT name FROM gpu_ops WHERE id = {i}") == [(FA3_FWD,)] for i in ids)


def test_helpers_join_an_attention_kernel_that_no_block_widens(tmp_path):
    """No GEMM within reach (and a backward kernel, never widened): the helpers still join the kernel beside them;
    a helper with no attention kernel beside it starts no call."""
    fwd = [COPY, FA3_SCHEDULER, FA3_FWD_PLAIN, FA3_COMBINE, COPY]
    bwd = [GEMM_O, FA3_BWD_PRE, FA3_BWD, FA3_BWD_POST, GEMM_QKV]
    lone = [GEMM_QKV, FA3_SCHEDULER, GEMM_O]
    trace = _write(tmp_path, "fa3_helpers", [[*fwd, MEMCPY, *bwd, MEMCPY, *lone]])
    rows = [r for r in _rows(trace) if r[0] != MEMCPY[0]]
    calls = [r[2] for r in rows]
    assert calls[0] is None and calls[1] == calls[2] == calls[3] is not None and calls[4] is None
    assert calls[5] is None and calls[6] == calls[7] == calls[8] is not None and calls[9] is None
    assert calls[6] != calls[1] and calls[10:] == [None, None, None]
    assert rows[11][1] == "fused_attention" and rows[11][3]  # attention work, but no call
    got = {
        c["op"]: (c["gpu_ops"], c["attention_kernel_ns"], c["impl"]) for c in trace.query("attention_calls").to_dicts()
    }
    assert got == {FA3_FWD_PLAIN: (3, 6_000, "flash3"), FA3_BWD: (3, 6_000, "flash3")}


@pytest.mark.parametrize(
    "raw, shown",
    [
        (ENABLE_IF, "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>"),  # parameters dropped (names.shorten)
        (MANGLED_ENABLE_IF, "vllm::fused_add_rms_norm_kernel"),
        (MANGLED_FA3_CUT, "flash::FlashAttnFwdSm90"),
        ("_ZN12_GLOBAL__N_113store_kvcacheILl2048EXX", "(anonymous namespace)::store_kvcache"),
        ("_ZNSt6vector7reserveXX", "std::vector::reserve"),
        ("_ZN4vllm18act_and_mul_ke", "_ZN4vllm18act_and_mul_ke"),  # cut inside its name: nothing is invented
        (FA3_SCHEDULER, "flash::prepare_varlen_num_blocks_kernel"),
    ],
)
def test_badly_rendered_names_show_their_function(raw, shown):
    assert format_unit(raw, "short") == shown
    assert names.shorten(names.readable(raw), 60) == shown


def test_an_fa3_op_is_one_flash3_call_and_fa3_precision_is_by_the_raw_name(tmp_path):
    """Eager FA3 (the flash_attn_3::fwd op launches the scheduler and the kernel): the op decides, one call, impl
    flash3. Precision rules read the raw name: the kernel is tensor_core, its helpers other."""
    b = TraceBuilder(trace_name="fa3_op")
    for i in range(3):
        b.op_with_kernels(
            "flash_attn_3::fwd", 10_000 + i * 100_000, [(FA3_SCHEDULER, None, 1_000), (FA3_FWD, None, 8_000)]
        )
    b.finish()
    b.write(tmp_path / "fa3_op.json.gz")
    trace = tracekit.load(tmp_path / "fa3_op.json.gz")
    calls = trace.query("attention_calls").to_dicts()
    assert [(c["impl"], c["gpu_ops"], c["attention_kernel_ns"], c["call_source"]) for c in calls] == [
        ("flash3", 2, 9_000, "op")
    ] * 3
    precision = dict(trace.rows("SELECT name, precision FROM kernel_precision_classes"))
    assert precision == {FA3_FWD: "tensor_core", FA3_SCHEDULER: "other"}
