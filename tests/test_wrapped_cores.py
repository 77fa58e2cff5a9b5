"""An attention core inside wrapper ops, in a trace recorded without Python scopes: truth by construction.

flex_attention called from eager code compiles itself, so its core runs inside FlexAttentionAutogradOp inside a
``Torch-Compiled Region``, with Dynamo's cache lookup and the default block mask (ops on ``[1, 1]`` tensors)
before it; the layer's projections are the region's siblings, not the core's. Here each layer of a small
pre-norm transformer (shapes recorded, no ``python_function`` events) runs its SDPA op inside
``Torch-Compiled Region: 0/0`` > ``CompiledFunction``: the call is read among the region's siblings, so it holds
its layer's q/k/v and output projections, their reshapes and the block-mask ops, and nothing of the layer's
norms, residual adds or MLP. Each GPU op's true stage is known by construction.
"""

from __future__ import annotations

import pytest
from synthetic import TraceBuilder

import tracekit

B, S, E, H = 1, 32, 256, 4
D = E // H
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
FLASH = (
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
    "cutlass::bfloat16_t>, false, false, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)"
)
NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, int>(int)"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl, int>(int)"
HIDDEN = [B, S, E]
HEADS = [B, H, S, D]


class _Layer:
    """Ops on one thread under a profiler step; each GPU op's true stage kept by its correlation id, and the
    ids of the CPU ops that belong to the attention call."""

    def __init__(self, b: TraceBuilder):
        self.b, self.t, self.truth, self.in_call, self.outside = b, 20_000, {}, [], []

    def op(self, name, dims, kernel=None, stage="other", *, call=False):
        args = {"Input Dims": dims} if dims is not None else None
        if kernel is None:
            ext = self.b.cpu_op(name, self.t, 2_000, args=args)
            self.t += 3_000
        else:
            r = self.b.op_with_kernels(name, self.t, [(kernel, None, 4_000)], args=args)
            self.truth[r.gpu[0]["correlation"]] = stage
            ext, self.t = r.external_id, r.end_ns + 1_000
        (self.in_call if call else self.outside).append(ext)

    def layer(self):
        self.op("aten::layer_norm", [HIDDEN, [], [E], [E], [], []], NORM)
        for _ in "qkv":
            self.op("aten::linear", [HIDDEN, [E, E], []], GEMM, "qkv_proj", call=True)
            self.op("aten::view", [HIDDEN, []], call=True)
            self.op("aten::transpose", [[B, S, H, D], [], []], call=True)
        # flex_attention's default block mask: tensors of blocks, not of the layer
        for name, dims in (("aten::new_ones", [[1, 1], [], [], [], [], []]), ("aten::sum", [[1, 1, 1, 1], [], [], []])):
            self.op(name, dims, call=True)
        self.op("TorchDynamo Cache Lookup", None, call=True)
        region = self.b.cpu_op("Torch-Compiled Region: 0/0", self.t, None)
        function = self.b.cpu_op("CompiledFunction", self.t + 500, None, args={"Input Dims": [HEADS, HEADS, HEADS]})
        sdpa = self.b.cpu_op("aten::scaled_dot_product_attention", self.t + 1_000, None,
                             args={"Input Dims": [HEADS, HEADS, HEADS, [], [], [], []]})  # fmt: skip
        self.t += 1_500
        self.op("aten::_scaled_dot_product_flash_attention", [HEADS, HEADS, HEADS, [], [], [], []], FLASH,
                "fused_attention", call=True)  # fmt: skip
        for ext, pad in ((sdpa, 500), (function, 1_000), (region, 1_500)):
            self.b.close(ext, self.t + pad)
            self.in_call.append(ext)
        self.t += 3_000
        self.op("aten::transpose", [HEADS, [], []], call=True)
        self.op("aten::reshape", [[B, S, H, D], []], call=True)
        self.op("aten::linear", [HIDDEN, [E, E], []], GEMM, "out_proj", call=True)
        self.op("aten::add", [HIDDEN, HIDDEN, []], ADD)  # the residual: the layer's
        self.op("aten::layer_norm", [HIDDEN, [], [E], [E], [], []], NORM)
        self.op("aten::linear", [HIDDEN, [4 * E, E], []], GEMM)
        self.op("aten::gelu", [[B, S, 4 * E], []], GELU)
        self.op("aten::linear", [[B, S, 4 * E], [E, 4 * E], []], GEMM)
        self.op("aten::add", [HIDDEN, HIDDEN, []], ADD)


@pytest.fixture(scope="module")
def wrapped(inputs):
    b = TraceBuilder(trace_name="wrapped_core_layers_by_construction")
    layer = _Layer(b)
    step = b.profiler_step(1, 10_000, None)
    for _ in range(3):
        layer.layer()
    b.close(step, layer.t + 1_000)
    b.finish()
    with tracekit.load(inputs.file(b, "wrapped_core_layers_by_construction.json")) as trace:
        yield trace, layer


def test_a_core_inside_a_compiled_region_gets_its_layers_projections(wrapped):
    """Every GPU op gets its true stage: the q/k/v and output GEMMs of each layer are its call's, the norms,
    residual adds and MLP are other."""
    trace, layer = wrapped
    got = dict(trace.sql("SELECT g.correlation, s.stage FROM gpu_op_stages s JOIN gpu_ops g USING (id)").rows())
    assert {c: got.get(c) for c in layer.truth} == layer.truth


def test_one_call_per_layer_holds_the_wrapped_core_and_its_block(wrapped):
    """One call per layer (the SDPA op's, widened to its block); the block-mask ops and Dynamo's lookup are
    inside it, the layer's own ops outside."""
    trace, layer = wrapped
    calls = trace.query("attention_calls").to_dicts()
    assert [(c["call_source"], c["gpu_ops"], c["heads"], c["head_dim"]) for c in calls] == [("op", 5, H, D)] * 3
    ext_call = dict(
        trace.sql(
            """SELECT s.external_id, c.call_id IS NOT NULL FROM cpu_slices s JOIN cpu_stages c USING (id)
               WHERE s.kind = 'cpu_op'"""
        ).rows()
    )
    assert {e: ext_call[e] for e in layer.in_call} == dict.fromkeys(layer.in_call, True)
    assert {e: ext_call[e] for e in layer.outside} == dict.fromkeys(layer.outside, False)
