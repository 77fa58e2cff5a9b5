"""Shapes of attention calls made by varlen and paged ops, whose query is ``[T, H, D]`` over a batch's tokens.

flash-attn's varlen functions, vLLM's and aiter's attention ops take q ``[T, H, D]`` and k, v ``[T, Hkv, D]``: the
heads and head dim are in their ``Input Dims`` (record_shapes), the batch and each sequence's length only in
``cu_seqlens`` / attention metadata, whose values the profiler does not record. So heads, KV heads and head dim
are filled, batch, lengths and FLOPs stay NULL (unknown), and without recorded shapes everything does.
"""

from __future__ import annotations

import pytest
from synthetic import TraceBuilder

SHAPES = ("heads", "kv_heads", "head_dim", "batch", "seq_q", "seq_kv", "batch_heads", "flops")


@pytest.mark.parametrize(
    "op, dims, want",
    [
        # 300 tokens of 3 sequences (cu_seqlens [4]), 16 query heads of 128, 4 KV heads (grouped).
        (
            "flash_attn::_flash_attn_varlen_forward",
            [[300, 16, 128], [300, 4, 128], [300, 4, 128], [4], [4]],
            (16, 4, 128, None, None, None, None, None),
        ),
        ("flash_attn::_flash_attn_varlen_forward", None, (None,) * 8),  # recorded without shapes
        # A paged cache as key ([blocks, block size, Hkv, D]): not [T, Hkv, D], nothing read.
        ("vllm::unified_attention", [[300, 16, 128], [512, 16, 4, 128], [512, 16, 4, 128]], (None,) * 8),
    ],
)
def test_a_varlen_call_has_the_heads_its_query_shows_by_construction(inputs, op, dims, want):
    b = TraceBuilder(trace_name="varlen")
    args = {"Input Dims": dims, "Input type": ["c10::BFloat16"] * len(dims)} if dims else None
    b.op_with_kernels(op, 1_000, [("flash_fwd_kernel", None, 10_000)], args=args)
    b.finish()
    trace = inputs.trace(inputs.file(b, "varlen.json"))
    calls = trace.query("attention_calls").to_dicts()
    assert [tuple(c[k] for k in SHAPES) for c in calls] == [want]


def test_vllm_paged_attention_calls_have_heads_and_head_dim(load_shared):
    """The shared vLLM trace (gpt-oss, fp8 KV cache): unified_attention_with_output takes q [888, 8, 64] and
    k, v [888, 1, 64]; its batch and lengths are not in the trace."""
    trace = load_shared("tracelens/b200_vllm_eager_paged-fp8.json.gz")
    calls = trace.query("attention_calls").to_dicts()
    assert calls and {tuple(c[k] for k in SHAPES) for c in calls} == {(8, 1, 64, None, None, None, None, None)}
