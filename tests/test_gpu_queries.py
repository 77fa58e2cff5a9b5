"""The gpu.* queries against answers computed without tracekit.

Ground truth comes from three places: the post's attention variants and
small hand-built traces (tests/synthetic.py, truth by construction), the raw
JSON of the shared traces read with Python's json module, and, for
occupancy, the "est. achieved occupancy %" that Kineto computed with
cuda_occupancy.h on the machine that recorded each trace.
"""

from __future__ import annotations

import gzip
import json
import statistics
import struct
from collections import defaultdict
from decimal import Decimal

import duckdb
import pytest
from conftest import SHARED_TRACES, VARIANTS
from synthetic import (
    A100_SXM4_80GB,
    CUDNN_KERNEL,
    FLASH_KERNEL,
    GEMM_QK_BF16,
    SGEMM_PV,
    SGEMM_QK,
    TraceBuilder,
    post_variants,
    theoretical_occupancy,
)

import tracekit
from tracekit.errors import TracekitError
from tracekit.model import rules

RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
GPU_TRACES = [t for t in SHARED_TRACES if "cpu_only" not in t]  # every shared trace with GPU ops
NVIDIA_TRACES = [p for p in GPU_TRACES if "/a100" in p or "/v100" in p or "/b200" in p or "/h100" in p]


@pytest.fixture(scope="module")
def variants(post_traces):
    return post_traces


def _load(builder: TraceBuilder, tmp_path, name="t.json.gz"):
    builder.finish()
    path = tmp_path / name
    builder.write(path)
    return tracekit.load(path)


def _raw(path):
    """traceEvents of a raw trace, numbers as Decimal (epoch-scale µs need more than a float)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        doc = json.load(fh, parse_float=Decimal)
    return doc if isinstance(doc, list) else doc["traceEvents"], ({} if isinstance(doc, list) else doc)


def _ns(us) -> int:
    return int(Decimal(us) * 1000)


def _union(intervals) -> int:
    total, cur = 0, None
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            total += cur[1] - cur[0] if cur else 0
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return total + (cur[1] - cur[0] if cur else 0)


def _rows(trace, query, **params):
    return trace.query(query, **params).to_dicts()


# ---- precision classes ------------------------------------------------------


def test_shipped_rule_rows_are_well_formed():
    con = duckdb.connect()
    rules.load(con)
    rows = con.execute("SELECT pattern, precision, note FROM rule_kernel_precision ORDER BY rule_order").fetchall()
    assert len(rows) >= 20
    for pattern, precision, note in rows:
        assert precision in ("tensor_core", "fp32_simt", "other"), (pattern, precision)
        assert pattern and note, pattern


def test_rule_row_with_an_unquoted_comma_is_an_error(tmp_path):
    (tmp_path / "kernel_precision.csv").write_text("pattern,precision,note\n(int, )float,fp32_simt,x\n")
    with pytest.raises(TracekitError, match=r"kernel_precision.csv:2: .*quote a field that holds a comma"):
        rules.load(duckdb.connect(), [tmp_path])


def test_a_long_user_rule_file_keeps_every_row_in_order(tmp_path):
    """Rule rows go in bound INSERTs of up to 500 rows: 1,234 user rows, then the shipped ones, all ranked."""
    (tmp_path / "kernel_precision.csv").write_text(
        "pattern,precision,note\n" + "".join(f"^k{i}$,tensor_core,row {i}\n" for i in range(1234))
    )
    con = duckdb.connect()
    rules.load(con, [tmp_path])
    shipped = len(list((rules.SHIPPED / "kernel_precision.csv").read_text().strip().splitlines())) - 1
    rows = con.execute("SELECT pattern, note, rule_order FROM rule_kernel_precision ORDER BY rule_order").fetchall()
    assert len(rows) == 1234 + shipped
    assert rows[:1234] == [(f"^k{i}$", f"row {i}", i + 1) for i in range(1234)]
    assert [r[2] for r in rows] == list(range(1, len(rows) + 1))


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_kernels_get_their_precision(name, variants):
    trace, v = variants[name]
    got = {r["name"]: r["precision"] for r in _rows(trace, "kernel_classes", include_orphans=True)}
    want = {g["name"]: g["precision"] for g in v.truth["gpu_ops"] if g["kind"] == "kernel"}
    assert got == want


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("include_orphans", [False, True])
def test_kernel_precision_totals_equal_truth(name, include_orphans, variants):
    trace, v = variants[name]
    per_class = defaultdict(lambda: defaultdict(int))
    for g in v.truth["gpu_ops"]:
        if g["kind"] == "kernel" and (include_orphans or not g["orphan"]):
            per_class[g["precision"]][g["name"]] += g["dur_ns"]
    counts = defaultdict(int)
    for g in v.truth["gpu_ops"]:
        if g["kind"] == "kernel" and (include_orphans or not g["orphan"]):
            counts[g["precision"]] += 1
    grand = sum(sum(n.values()) for n in per_class.values())
    want = {}
    for precision, names in per_class.items():
        top = min(names.items(), key=lambda kv: (-kv[1], kv[0]))
        total = sum(names.values())
        want[precision] = {
            "gpu_ops": counts[precision],
            "kernels": len(names),
            "total_ns": total,
            "share_pct": round(100 * total / grand, 3),
            "top_kernel": top[0],
            "top_kernel_ns": top[1],
        }
    got = {r.pop("precision"): r for r in _rows(trace, "kernel_precision", include_orphans=include_orphans)}
    for r in got.values():
        assert r.pop("trace") == name
    assert got == want


def test_math_runs_fp32_sgemm_where_naive_runs_bf16_tensor_cores(variants):
    """The post's finding: SDPA math upcasts to FP32 and leaves the tensor cores idle."""
    math_ = {r["precision"]: r for r in _rows(variants["math"][0], "kernel_precision")}
    naive = {r["precision"]: r for r in _rows(variants["naive"][0], "kernel_precision")}
    assert "tensor_core" not in math_ and math_["fp32_simt"]["top_kernel"] == SGEMM_QK
    assert math_["fp32_simt"]["kernels"] == 2  # SGEMM_QK and SGEMM_PV
    assert "fp32_simt" not in naive and naive["tensor_core"]["top_kernel"] == GEMM_QK_BF16
    classes = {r["name"]: r for r in _rows(variants["math"][0], "kernel_classes")}
    assert classes[SGEMM_PV]["rule"] == "(?i)sgemm"


# Kernel families of the shared traces, labelled by reading their names (not by the rules):
# a name containing one of these markers belongs to that class; every other kernel is "other".
TENSOR_CORE_MARKERS = (
    "_s16816gemm",
    "_s1688gemm",
    "_s1688dgrad",
    "_s1688fprop",
    "_s1688wgrad",
    "_s161616gemm",  # MMA shapes
    "sm80_xmma_",
    "sm90_xmma_",
    "MmaTensorOp",  # cuDNN / cuBLAS xmma (tf32 / bf16), mangled CUTLASS conv
    "nvjet_tst_",
    "bmm_Bfloat16_MxE2m1",
    "bmm_MxE4m3_MxE2m1",  # cuBLAS / trtllm-gen on B200
    "_MI16x16x1_",
    "_MI32x32x1_",
    "_MI16x16x16x1_",  # MFMA in Tensile (Cijk_*) names: the matrix-instruction tile
    "_MI32x32x8x1_",
    "igemm_fwd_gtcx3",  # MIOpen implicit GEMM on xdlops (MFMA)
    "_xdl_cshuffle",  # composable_kernel xdl (MFMA) convolutions
    "igemm_fwd_gtcx2",
    "igemm_bwd_gtcx2",
    "igemm_wrw_gtcx2",  # AMD matrix cores
    "flash_fwd_kernel",
    "fmhaSm100aKernel",
    "paged_attention_ll4mi_QKV_mfma16",
    "fmha_cutlassF",  # attention
    "fort_native_sdpa",
)
ATTN_FWD = "attn_fwd"  # AMD's Triton flash attention kernel is named exactly that
FP32_SIMT_MARKERS = (
    "volta_sgemm_",
    "ampere_sgemm_",
    "simt_sgemm",
    "scudnn_",
    "implicit_convolve_sgemm<float",
    "explicit_convolve_sgemm<float",
    "wgrad_alg0_engine<float",
    "dgrad_engine<float",
    "gemmk1_kernel<float",
)


def _expected_class(name: str) -> str:
    if name == ATTN_FWD or any(m in name for m in TENSOR_CORE_MARKERS):
        return "tensor_core"
    if any(m in name for m in FP32_SIMT_MARKERS):
        return "fp32_simt"
    return "other"


def test_every_shared_trace_kernel_is_classified_as_labelled(load_shared):
    names: dict[str, str] = {}
    for rel in GPU_TRACES:
        for r in _rows(load_shared(rel), "kernel_classes", include_orphans=True):
            names[r["name"]] = r["precision"]
    wrong = {n: (got, _expected_class(n)) for n, got in names.items() if got != _expected_class(n)}
    assert not wrong
    # every label describes at least one real kernel, and the classes are all populated
    for marker in TENSOR_CORE_MARKERS[:-2] + FP32_SIMT_MARKERS:  # the last two are synthetic-only kernels
        assert any(marker in n for n in names), marker
    # bait for loose patterns: names that mention tensors, flash, attention, mma-like letters or a reduce
    for bait in ("SubTensorOpWithScalar1d", "SubTensorOpWithCastTensor1d", "create_flashinfer_kv_indices_triton"):
        assert names[bait] == "other"
    assert [p for n, p in names.items() if "paged_attention_ll4mi_reduce_kernel" in n] == ["other"]
    assert [p for n, p in names.items() if "reshape_and_cache_flash_kernel" in n] == ["other"]


RULE_CASES = [  # names seen in the wild that the shared traces lack
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_"
        "execute_kernel__5x_cublas",
        "fp32_simt",
    ),  # FP32 with TF32 off: ffma, not tensor cores
    (
        "sm80_xmma_fprop_implicit_gemm_indexed_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize64x64x8_stage3_"
        "warpsize1x4x1_g1_ffma_aligna4_alignc4",
        "fp32_simt",
    ),
    ("volta_h884gemm_64x64_ldg8_nn", "tensor_core"),
    ("volta_fp16_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1", "tensor_core"),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", "tensor_core"),
    ("turing_int32_i8816gemm_int8_128x128_ldg16_nt", "tensor_core"),
    ("ampere_h16816gemm_256x128_ldg8_stages_32x3_nn", "tensor_core"),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
        "kernel__5x_cublas",
        "tensor_core",
    ),
    (
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
        "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<4, "
        "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecialized> > > >"
        "(cutlass::gemm::kernel::GemmUniversal::Params)",
        "tensor_core",
    ),
    ("nvjet_sss_tf32_128x256_TNT", "tensor_core"),
    (
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, "
        "cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >"
        "(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)",
        "fp32_simt",
    ),
    (
        "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, 4, 4, false, "
        "false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
        "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, "
        "float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, "
        "cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, "
        "float>, float, float)",
        "other",
    ),  # bf16 GEMV: memory-bound, CUDA cores, but not FP32
    (
        "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 4, 4, true, cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float> >"
        "(cublasGemmSmallNParams<cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
        "fp32_simt",
    ),
    (
        "void vllm::paged_attention_v2_kernel<__nv_bfloat16, __nv_bfloat16, 128, 16, 128, "
        "(vllm::Fp8KVCacheDataType)0, false, 512>(float*, float*, __nv_bfloat16*, __nv_bfloat16 const*, "
        "__nv_bfloat16 const*, __nv_bfloat16 const*, int, float, int const*, int const*, int, float const*, "
        "int, int, int, float const*, float const*, int, int, int)",
        "other",
    ),  # dot products on CUDA cores
    (
        "void vllm::paged_attention_v2_reduce_kernel<__nv_bfloat16, 128, 128, 512>(__nv_bfloat16*, "
        "float const*, float const*, __nv_bfloat16 const*, int const*, int)",
        "other",
    ),
    ("kernel_unified_attention_2d", "tensor_core"),
    (
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, true, true, false, "
        "false, true, true, false, false, false>(flash::Flash_fwd_params)",
        "tensor_core",
    ),
    (
        "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, 4, 4, false>"
        "(flash::Flash_fwd_params)",
        "other",
    ),
    (
        "void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128, 128, 8, 2, 4, 2, false, false, "
        "cutlass::half_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::half_t> > >(Flash_bwd_params)",
        "other",
    ),
    (
        "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 2, 4, 2, "
        "false, false, cutlass::half_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::half_t> >, true, false, "
        "false, false, false, false>(Flash_bwd_params)",
        "tensor_core",
    ),
    ("_attn_bwd_preprocess", "other"),
    ("triton_tem_fused_flex_attention_0", "tensor_core"),  # FlexAttention compiled (an H200's names)
    ("triton_tem_fused_flex_attention_backward_1", "tensor_core"),
    ("triton_per_fused_flex_attention_backward_0", "other"),  # the backward's delta: a reduction
    ("_attn_bwd", "tensor_core"),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<KernelTraits, Params>(Params)", "tensor_core"),
    (
        "void flashinfer::BatchDecodeWithPagedKVCacheKernel<PosEncodingMode::kNone, 2u, 4u, 8u, 16u, 1u, 8u, "
        "AttentionVariant, Params>(Params)",
        "other",
    ),  # decode runs on CUDA cores
    (
        "void ck::kernel_gemm_xdl_cshuffle_v3<GridwiseGemm, true, (InMemoryDataOperationEnum)0, 1, "
        "(TailNumber)7>(GridwiseGemm::Argument)",
        "tensor_core",
    ),
    (
        "Cijk_Ailk_Bljk_SB_MT64x64x16_SN_1LDSB0_AMAS3_BL1_BS1_EPS1_GLVWA4_GLVWB4_GRVW4_GSU1_ISA908_IU1_K1_KLA_"
        "LBSPP0_LPA0_LPB0_LRVW4_MDA2_NLCA1_NLCB1_PGR1_PLR1_SIA1_SS1_SU32_SUS256_SVW4_TT4_4_TLDS1_USFGROn1_VAW1_"
        "VS1_VW4_WG16_16_1_WGM8",
        "fp32_simt",
    ),  # Tensile single precision without an MI tile: vector ALUs
    # letters of mma inside ordinary words must not count
    ("void at::native::(anonymous namespace)::gamma_grad_kernel<float>(float*, float const*, long)", "other"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::comma_functor, std::array<char*, 2ul> >"
        "(int, at::native::comma_functor, std::array<char*, 2ul>)",
        "other",
    ),
]


def test_rules_on_names_not_in_the_traces(tmp_path):
    b = TraceBuilder()
    for i, (name, _) in enumerate(RULE_CASES):
        corr = b.launch("cudaLaunchKernel", 100_000 * i, 5_000)
        b.kernel(name, 100_000 * i + 8_000, 1_000 + i, corr)
    trace = _load(b, tmp_path)
    got = {r["name"]: r["precision"] for r in _rows(trace, "kernel_classes")}
    assert got == dict(RULE_CASES)


def test_user_rules_come_first_and_are_named(tmp_path):
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "kernel_precision.csv").write_text(
        "pattern,precision,note\n" + f"^{SGEMM_QK}$,tensor_core,pretend this one is TF32\n"
    )
    post_variants(["math"])["math"].write(tmp_path / "math.json.gz")
    with tracekit.load(tmp_path / "math.json.gz") as trace:
        trace.use_rules([rules_dir])
        classes = {r["name"]: r for r in _rows(trace, "kernel_classes")}
        file_of = dict(trace.con.execute("SELECT rule_order, rule_file FROM rule_kernel_precision").fetchall())
    overridden = classes[SGEMM_QK]
    assert (overridden["precision"], overridden["rule"], overridden["rule_order"]) == (
        "tensor_core",
        f"^{SGEMM_QK}$",
        1,
    )
    assert overridden["rule_note"] == "pretend this one is TF32"
    assert file_of[1] == str(rules_dir / "kernel_precision.csv")
    assert (classes[SGEMM_PV]["precision"], classes[SGEMM_PV]["rule"]) == ("fp32_simt", "(?i)sgemm")
    assert file_of[classes[SGEMM_PV]["rule_order"]].endswith("tracekit/rules/kernel_precision.csv")


# ---- launch APIs --------------------------------------------------------------


def test_launch_api_hand_built(tmp_path):
    b = TraceBuilder()
    c1 = b.launch("cudaLaunchKernel", 1_000, 5_000)
    b.kernel("k1", 8_000, 10_000, c1)
    c2 = b.launch("cudaLaunchKernel", 7_000, 4_000)
    b.kernel("k2", 20_000, 3_000, c2)
    c3 = b.launch("cuLaunchKernelEx", 12_000, 11_900)
    b.kernel("cudnn_like", 30_000, 7_000, c3)
    b.graph_launch(40_000, [("g1", 50_000, 2_000), ("g2", 53_000, 3_000), ("g3", 57_000, 4_000)], dur_ns=9_000)
    m = b.launch("cudaMemcpyAsync", 62_000, 6_000)
    b.memcpy("Memcpy DtoD (Device -> Device)", 70_000, 1_500, m, bytes=4096)
    b.runtime_call("cudaMemsetAsync", 72_000, 2_000)  # launched nothing: not a launch
    b.runtime_call("cudaStreamSynchronize", 75_000, 20_000)
    b.orphan_kernel("queued_before_the_trace", 500, 900)
    trace = _load(b, tmp_path)
    want = {
        "cudaLaunchKernel": (2, 2, 1.0, 9_000, 4_500.0, 13_000),
        "cudaGraphLaunch": (1, 3, 3.0, 9_000, 9_000.0, 9_000),
        "cuLaunchKernelEx": (1, 1, 1.0, 11_900, 11_900.0, 7_000),
        "cudaMemcpyAsync": (1, 1, 1.0, 6_000, 6_000.0, 1_500),
    }
    cols = ("launches", "gpu_ops", "ops_per_launch", "cpu_ns", "cpu_ns_avg", "gpu_ns")
    got = {r["api"]: tuple(r[c] for c in cols) for r in _rows(trace, "launch_api")}
    assert got == want
    assert [r["api"] for r in _rows(trace, "launch_api")] == [
        "cudaLaunchKernel",
        "cudaGraphLaunch",
        "cuLaunchKernelEx",
        "cudaMemcpyAsync",
    ]  # by gpu_ns
    every = {r["api"]: tuple(r[c] for c in cols) for r in _rows(trace, "launch_api", include_orphans=True)}
    assert every == {**want, "(no launch in trace)": (0, 1, None, None, None, 900)}
    share = {r["api"]: r["gpu_share_pct"] for r in _rows(trace, "launch_api")}
    assert share["cudaLaunchKernel"] == round(100 * 13_000 / 30_500, 3)


@pytest.mark.parametrize("name", VARIANTS)
def test_launch_api_on_variants(name, variants):
    trace, v = variants[name]
    call_ns = {
        e["args"]["correlation"]: e["dur"]
        for e in v.builder.events
        if e.get("cat") in RUNTIME_CATS and "correlation" in e.get("args", {})
    }
    want = defaultdict(lambda: [set(), 0, 0])
    for g in v.truth["gpu_ops"]:
        if not g["orphan"]:
            w = want[g["launch_api"]]
            w[0].add(g["correlation"])
            w[1] += 1
            w[2] += g["dur_ns"]
    want = {api: (len(c), n, sum(call_ns[x] for x in c), ns) for api, (c, n, ns) in want.items()}
    got = {r["api"]: (r["launches"], r["gpu_ops"], r["cpu_ns"], r["gpu_ns"]) for r in _rows(trace, "launch_api")}
    assert got == want
    if name == "cudnn":
        assert got["cuLaunchKernelEx"][:2] == (3, 3)  # one cuDNN kernel per step


def _launches_from_json(path):
    events, _ = _raw(path)
    calls = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS and "correlation" in (e.get("args") or {}):
            assert e["args"]["correlation"] not in calls  # unique in these traces, so matching is exact
            calls[e["args"]["correlation"]] = e
    want = defaultdict(lambda: [set(), 0, 0])
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in GPU_CATS:
            call = calls.get(e["args"]["correlation"])
            if call is not None:
                w = want[call["name"]]
                w[0].add(e["args"]["correlation"])
                w[1] += 1
                w[2] += _ns(e["dur"])
    return {api: (len(c), n, sum(_ns(calls[x]["dur"]) for x in c), ns) for api, (c, n, ns) in want.items()}


@pytest.mark.parametrize("rel", GPU_TRACES)
def test_launch_api_matches_the_raw_json(rel, shared_dir, load_shared):
    want = _launches_from_json(shared_dir / rel)
    got = {
        r["api"]: (r["launches"], r["gpu_ops"], r["cpu_ns"], r["gpu_ns"]) for r in _rows(load_shared(rel), "launch_api")
    }
    assert got == want


def test_graph_and_hip_launches_are_their_own_apis(load_shared):
    sglang = {
        r["api"]: r for r in _rows(load_shared("tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz"), "launch_api")
    }
    assert sglang["hipGraphLaunch"]["launches"] == 1 and sglang["hipGraphLaunch"]["gpu_ops"] > 500
    assert sglang["hipGraphLaunch"]["ops_per_launch"] == sglang["hipGraphLaunch"]["gpu_ops"]
    mi300 = {r["api"] for r in _rows(load_shared("tracelens/mi300_bert-small_sdpa-flash.json.gz"), "launch_api")}
    assert {"hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel"} <= mi300
    b200 = {r["api"] for r in _rows(load_shared("tracelens/b200_vllm_eager_paged-fp8.json.gz"), "launch_api")}
    assert {"cuLaunchKernelEx", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernel"} <= b200


# ---- occupancy -------------------------------------------------------------------


def _occupancy(trace, **params):
    return {r["name"]: r for r in _rows(trace, "occupancy", **params)}


def test_the_posts_occupancy_numbers(variants):
    flash = _occupancy(variants["flash"][0])[FLASH_KERNEL]
    assert (flash["block_threads"], flash["registers_per_thread"]) == (128, 255)
    assert (flash["theoretical_blocks_per_sm"], flash["theoretical_warps_per_sm"], flash["max_warps_per_sm"]) == (
        2,
        8,
        64,
    )
    assert flash["theoretical_occupancy_pct"] == 12.5 and flash["limiter"] == "registers"
    assert (flash["reported_occupancy_pct"], flash["occupancy_pct"], flash["occupancy_source"]) == (
        13.0,
        13.0,
        "reported",
    )
    cudnn = _occupancy(variants["cudnn"][0])[CUDNN_KERNEL]
    assert (cudnn["block_threads"], cudnn["registers_per_thread"]) == (256, 240)
    assert (cudnn["theoretical_blocks_per_sm"], cudnn["theoretical_warps_per_sm"]) == (1, 8)
    assert cudnn["theoretical_occupancy_pct"] == 12.5 and cudnn["limiter"] == "registers"
    # CUPTI's 0 (the kernel needs more than 48 KiB of shared memory) is replaced by the theory
    assert (cudnn["reported_occupancy_pct"], cudnn["occupancy_pct"], cudnn["occupancy_source"]) == (
        0.0,
        12.5,
        "theoretical",
    )


@pytest.mark.parametrize("name", VARIANTS)
def test_theoretical_occupancy_matches_the_reference(name, variants):
    trace, v = variants[name]
    rows = _rows(trace, "occupancy", include_orphans=True)
    assert {r["name"] for r in rows} == {g["name"] for g in v.truth["gpu_ops"] if g["kind"] == "kernel"}
    for r in rows:
        ref = theoretical_occupancy(r["registers_per_thread"], r["block_threads"], r["shared_memory_bytes"])
        assert r["theoretical_blocks_per_sm"] == ref["blocks_per_sm"], r["name"]
        assert r["theoretical_warps_per_sm"] == ref["warps_per_sm"], r["name"]
        assert r["max_warps_per_sm"] == ref["max_warps_per_sm"]
        assert r["theoretical_occupancy_pct"] == round(ref["occupancy_pct"], 3)
        assert r["device_name"] == A100_SXM4_80GB["name"]
    for k, ref in v.truth["occupancy"].items():
        row = next(r for r in rows if r["name"] == k)
        assert row["theoretical_occupancy_pct"] == ref["occupancy_pct"]


def _one_kernel_each(b: TraceBuilder, configs, device=0):
    for i, (name, threads, regs, smem) in enumerate(configs):
        corr = b.launch("cudaLaunchKernel", 50_000 * i, 5_000)
        b.kernel(
            name,
            50_000 * i + 8_000,
            2_000,
            corr,
            block=(threads, 1, 1),
            registers_per_thread=regs,
            shared_memory=smem,
            grid=(1000, 1, 1),
            est_occupancy=1,
            device=device,
        )


def test_occupancy_limiters_on_an_a100(tmp_path):
    b = TraceBuilder()
    _one_kernel_each(
        b,
        [
            ("threads", 1024, 16, 0),  # 32 warps a block, 64 slots: 2 blocks, full
            ("blocks", 32, 16, 0),  # one warp a block: 32 resident blocks = 32 of 64 warps
            ("smem", 128, 32, 100 * 1024),  # 100 KiB + 1 KiB reserved: one block in 164 KiB
            # 40 registers x 96 threads: 1280 registers a warp, 12 warps in each quarter of the register
            # file, 48 warps = 16 blocks of 3 warps (cuda_occupancy.h); 65536 / (1280 x 3) would say 17
            ("subpartitions", 96, 40, 0),
        ],
    )
    got = _occupancy(_load(b, tmp_path))
    cols = ("theoretical_blocks_per_sm", "theoretical_warps_per_sm", "theoretical_occupancy_pct", "limiter")
    assert {n: tuple(r[c] for c in cols) for n, r in got.items()} == {
        "threads": (2, 64, 100.0, "threads"),
        "blocks": (32, 32, 50.0, "blocks"),
        "smem": (1, 4, 6.25, "shared_memory"),
        "subpartitions": (16, 48, 75.0, "registers"),
    }
    lim = ("blocks_limit_registers", "blocks_limit_shared_memory", "blocks_limit_threads", "blocks_limit_blocks")
    assert tuple(got["smem"][c] for c in lim) == (16, 1, 16, 32)
    assert tuple(got["threads"][c] for c in lim) == (4, 164, 2, 32)  # 1 KiB reserve even without shared memory


def test_occupancy_depends_on_the_architecture(tmp_path):
    v100 = dict(
        A100_SXM4_80GB,
        name="Tesla V100-SXM2-32GB",
        computeMajor=7,
        computeMinor=0,
        sharedMemPerMultiprocessor=98304,
        sharedMemPerBlockOptin=98304,
        numSms=80,
    )
    turing = dict(
        A100_SXM4_80GB,
        name="NVIDIA T4",
        computeMajor=7,
        computeMinor=5,
        maxThreadsPerMultiprocessor=1024,
        sharedMemPerMultiprocessor=65536,
        numSms=40,
    )
    want = {}
    for label, props in (("v100", v100), ("t4", turing)):
        b = TraceBuilder()
        b.device_properties = [dict(props, id=0)]
        _one_kernel_each(b, [("smem48k", 128, 32, 48 * 1024), ("blocks", 32, 16, 0)])
        want[label] = _occupancy(_load(b, tmp_path, f"{label}.json.gz"))
    # Volta reserves no shared memory per block: two 48 KiB blocks fit in 96 KiB (three on an A100)
    assert want["v100"]["smem48k"]["theoretical_blocks_per_sm"] == 2
    assert want["v100"]["smem48k"]["limiter"] == "shared_memory"
    assert want["v100"]["blocks"]["blocks_limit_blocks"] == 32
    # Turing holds 16 resident blocks and 32 warps
    t4 = want["t4"]["blocks"]
    assert (
        t4["theoretical_blocks_per_sm"],
        t4["max_warps_per_sm"],
        t4["theoretical_occupancy_pct"],
        t4["limiter"],
    ) == (16, 32, 50.0, "blocks")


def test_a_single_device_is_used_whatever_its_index(tmp_path):
    """ROCm traces list the process's GPU as device 0 while its kernels carry the physical index."""
    b = TraceBuilder()
    _one_kernel_each(b, [("on_gpu3", 128, 255, 0)], device=3)
    row = _occupancy(_load(b, tmp_path))["on_gpu3"]
    assert (row["device"], row["device_name"], row["theoretical_blocks_per_sm"]) == (3, A100_SXM4_80GB["name"], 2)


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


@pytest.mark.parametrize("rel", NVIDIA_TRACES)
def test_reported_occupancy_is_kinetos_estimate_from_our_theory(rel, shared_dir, load_shared):
    """Kineto wrote est. achieved occupancy % = min(grid blocks / SMs, resident blocks) x threads /
    max threads per SM, resident blocks from cuda_occupancy.h on the recording machine, without
    the shared-memory opt-in (so a block above sharedMemPerBlock gets 0), in float32. Recomputing
    it from our theoretical_blocks_per_sm reproduces every launch's number; where the grid fills
    the GPU that checks the theory itself."""
    events, doc = _raw(shared_dir / rel)
    props = {p["id"]: p for p in doc["deviceProperties"]}
    theory = {
        (r["name"], r["device"], r["block_threads"], r["registers_per_thread"], r["shared_memory_bytes"]): r[
            "theoretical_blocks_per_sm"
        ]
        for r in _rows(load_shared(rel), "occupancy")
    }
    checked = binding = 0
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "Kernel"):
            continue
        a = e["args"]
        threads = a["block"][0] * a["block"][1] * a["block"][2]
        p = props[a["device"]]
        blocks = theory[(e["name"], a["device"], threads, a["registers per thread"], a["shared memory"])]
        reserve = 1024 if p["computeMajor"] >= 8 else 0
        if a["shared memory"] + reserve > p["sharedMemPerBlock"] + reserve:
            blocks = 0
        per_sm = _f32(a["grid"][0] * a["grid"][1] * a["grid"][2] / p["numSms"])
        if per_sm >= blocks:
            binding += 1
        occupancy = _f32(_f32(min(blocks, per_sm) * threads) / p["maxThreadsPerMultiprocessor"])
        assert int(0.5 + occupancy * 100.0) == a["est. achieved occupancy %"], (e["name"], a)
        checked += 1
    assert checked > 0
    if "triton" not in rel:  # its one kernel has a 1-block grid
        assert binding > 0


def test_amd_kernels_get_no_theoretical_occupancy(load_shared):
    rows = _rows(load_shared("tracelens/mi300_bert-small_sdpa-flash.json.gz"), "occupancy")
    assert rows and all(r["device_name"] == "AMD Instinct MI300X VF" for r in rows)  # device 2 -> the only device
    assert all(r["block_threads"] for r in rows)
    for col in (
        "registers_per_thread",
        "reported_occupancy_pct",
        "theoretical_blocks_per_sm",
        "theoretical_occupancy_pct",
        "limiter",
        "occupancy_pct",
        "occupancy_source",
    ):
        assert all(r[col] is None for r in rows), col


# ---- profiler steps --------------------------------------------------------------


def _expected_steps(steps):
    """steps: [(n, cpu_ns, [(start, end, same_thread)])] -> expected rows of step_summary."""
    kernel_ns = [sum(e - s for s, e, _ in ops) for _, _, ops in steps]
    mean, median = statistics.fmean(kernel_ns), statistics.median(kernel_ns)
    sd = statistics.stdev(kernel_ns) if len(kernel_ns) > 1 else None
    out = []
    for (n, cpu, ops), k in zip(steps, kernel_ns):
        busy = _union([(s, e) for s, e, _ in ops])
        span = max(e for _, e, _ in ops) - min(s for s, _, _ in ops) if ops else 0
        out.append(
            {
                "step": n,
                "step_name": f"ProfilerStep#{n}",
                "cpu_ns": cpu,
                "gpu_ops": len(ops),
                "step_thread_gpu_ops": sum(1 for *_, same in ops if same),
                "kernel_ns": k,
                "busy_ns": busy,
                "span_ns": span,
                "idle_ns": span - busy,
                "busy_pct": round(100 * busy / span, 3) if span else None,
                "kernel_ns_mean": round(mean, 3),
                "kernel_ns_median": round(median, 3),
                "kernel_ns_stddev": None if sd is None else round(sd, 3),
                "kernel_ns_cv_pct": None if sd is None else round(100 * sd / mean, 3),
                "kernel_ns_vs_median_pct": round(100 * (k - median) / median, 3) if median else None,
            }
        )
    return out


def _steps(trace):
    rows = _rows(trace, "step_summary")
    for r in rows:
        r.pop("trace")
    return rows


def test_step_summary_hand_built(tmp_path):
    """Four steps whose kernels take 580, 1084, 560 and 600 µs: the post's outlier step."""
    b = TraceBuilder()
    steps, t = [], 100_000
    for n, kernels in ((1, [580_000]), (2, [700_000, 344_000]), (3, [560_000]), (4, [600_000])):
        cpu = 2_000_000
        b.profiler_step(n, t, cpu)
        ops, gpu_t = [], t + 50_000
        for i, dur in enumerate(kernels):
            corr = b.launch("cudaLaunchKernel", t + 10_000 + 10_000 * i, 5_000)
            start = gpu_t + 20_000 * i  # step 2: two streams, the kernels overlap
            b.kernel(f"k{n}_{i}", start, dur, corr, stream=7 + i)
            ops.append((b.origin_ns + start, b.origin_ns + start + dur, True))
        if n == 2:  # the autograd thread launches too, outside the annotation but inside the step
            corr = b.launch("cudaLaunchKernel", t + 500_000, 5_000, tid=999)
            b.kernel("backward", t + 900_000, 40_000, corr)
            ops.append((b.origin_ns + t + 900_000, b.origin_ns + t + 940_000, False))
        steps.append((n, cpu, ops))
        t += cpu + 10_000
    b.orphan_kernel("queued_before_the_trace", 1_000, 5_000)  # no launch: in no step
    rows = _steps(_load(b, tmp_path))
    assert rows == _expected_steps(steps)
    assert [r["kernel_ns"] for r in rows] == [580_000, 1_084_000, 560_000, 600_000]
    assert rows[1]["kernel_ns_vs_median_pct"] == 83.729  # (1084 - 590) / 590
    assert rows[1]["busy_ns"] < rows[1]["kernel_ns"] and rows[1]["gpu_ops"] == rows[1]["step_thread_gpu_ops"] + 1


@pytest.mark.parametrize("name", VARIANTS)
def test_step_summary_on_variants(name, variants):
    trace, v = variants[name]
    cpu = {
        e["name"]: e["dur"]
        for e in v.builder.events
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }
    steps = []
    for step_name in v.truth["steps"]:
        n = int(step_name.split("#")[1])
        ops = [(g["ts_ns"], g["ts_ns"] + g["dur_ns"], True) for g in v.truth["gpu_ops"] if g["step"] == n]
        steps.append((n, cpu[step_name], ops))
    assert _steps(trace) == _expected_steps(steps)


@pytest.mark.parametrize("rel", ["hta/a100_nccl_rank0.json.gz", "hta/v100_ns_resolution.json.gz"])
def test_step_summary_matches_the_raw_json(rel, shared_dir, load_shared):
    """A step's GPU ops are those launched while it is open by any thread of its process."""
    events, _ = _raw(shared_dir / rel)
    gpu = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in GPU_CATS:
            gpu[e["args"]["correlation"]].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    calls = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS and (e.get("args") or {}).get("correlation") in gpu
    ]
    steps = []
    for s in sorted(
        (
            e
            for e in events
            if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
        ),
        key=lambda e: int(e["name"].split("#")[1]),
    ):
        lo, hi = _ns(s["ts"]), _ns(s["ts"]) + _ns(s["dur"])
        ops = [
            (start, end, str(c["tid"]) == str(s["tid"]))
            for c in calls
            if c["pid"] == s["pid"] and lo <= _ns(c["ts"]) < hi
            for start, end in gpu[c["args"]["correlation"]]
        ]
        steps.append((int(s["name"].split("#")[1]), _ns(s["dur"]), ops))
    rows = _steps(load_shared(rel))
    assert rows == _expected_steps(steps)
    # training traces launch the backward pass from the autograd thread, outside the step's annotation
    assert all(r["gpu_ops"] > 2 * r["step_thread_gpu_ops"] for r in rows)
