"""Eager attention found by op order, where no label, module or op marks a call.

``softmax(Q @ K^T) @ V`` written out in Python leaves, on one thread, a
matmul, a few elementwise ops (scale, mask, position bias), a softmax, maybe
a dropout and a cast, and a second matmul. This module finds that pattern
among sibling ops (same parent, same thread) around every softmax that no
call contains, and checks the shapes (``Input Dims``): the first product's
output ``[..., Sq, Skv]`` is the softmax's input and the second product's
left operand, and the second product's right operand has ``Skv`` rows. A
classifier's softmax has no such products around it and stays ``other``.
Without recorded shapes only the tightest pattern counts (at most
``UNSHAPED_GAP`` ops between the products and the softmax), or one whose ops
between are all score ops (``SCORE_OPS``: scale, mask, position bias, casts).

Each pattern becomes a call mark (``kind = 'eager'``, impl ``eager``) whose
scope is the time from the first product's start to the second product's end
on that thread, widened with recorded shapes to the attention block around it
(``_block``: the projections, head reshapes, rotary embedding and KV-cache
update before the core, the output projection after it); inside it the op
rules give the stages as in any call. The
call's id is the first product's op id (its ``mkey`` is the negated id, so it
does not collide with the op's own mark).

The steps are ``attribution/eager_*`` modules (the block's in ``attribution/eager_block_*``), run in
order by ``find``; what each does is in its header.
"""

from __future__ import annotations

import duckdb

from tracekit.common import sqlmodules
from tracekit.model import link

SOFTMAX = r"^aten::(_?softmax|_safe_softmax)$"
# baddbmm: BLOOM's scores (alibi + Q @ K^T, its operands after the bias); einsum: 'bhid,bhjd->bhij'
# (its dims are a tensor list: shape checks do not apply, the unshaped gap does).
PRODUCT = r"^aten::(bmm|matmul|baddbmm|einsum)$"
# Sibling ops allowed between the QK^T product and the softmax (scale, mask,
# position bias, casts) and between the softmax and the PV product (dropout, casts).
MAX_GAP_BEFORE = 64  # (DeBERTa's c2p and p2c position terms: some 60)
MAX_GAP_AFTER = 8
UNSHAPED_GAP = 3
# Ops that only scale, mask, bias, cast, reshape or drop the scores: without shapes, a pattern whose ops between
# the products and the softmax are all of these counts with the shaped gaps (GPT-2's div, slice, slice, where;
# T5's relative-position buckets: arange, sub, abs, log, min, embedding, permute, add; flex_attention's reference
# path: its score_mod's where, logsumexp, the fully-masked-row check).
SCORE_OPS = (
    r"^aten::(mul|mul_|div|div_|add|add_|sub|sub_|rsub|neg|abs|log|exp|where|masked_fill|masked_fill_|"
    r"slice|select|narrow|view|reshape|_unsafe_view|expand|expand_as|unsqueeze|squeeze|transpose|permute|"
    r"contiguous|clone|to|_to_copy|type_as|copy_|fill_|full|full_like|ones|ones_like|zeros|zeros_like|empty|"
    r"empty_like|new_ones|new_zeros|new_full|new_empty|scalar_tensor|arange|tril|triu|clamp|clamp_min|clamp_max|"
    r"min|max|amax|amin|minimum|maximum|tanh|logsumexp|all|any|dropout|native_dropout|isneginf|isinf|isnan|"
    r"logical_not|bitwise_not|eq|ne|lt|le|gt|ge|embedding|detach|detach_|alias|lift_fresh|lift_fresh_copy)$"
)
# How far from the core a block's projections, rotary embedding and KV-cache update may sit.
BLOCK_BEFORE = 128
BLOCK_AFTER = 16
# Tensor-parallel communication inside an attention block. An op a rule names a collective decides its subtree
# even inside a projection's module scope (attribution/slice_stages) and, beside an eager block, bounds it (right
# after the output projection it is the block's); a communication GPU op (the gpu_op_category macro) that a
# projection's decision took in is this stage (attribution/gpu_op_stage_decisions).
TP_COMM = "tp_comm"
# An RMSNorm written in plain ops (Hugging Face's Qwen3, Gemma 3, OLMo-2 q_norm and k_norm, DeepSeek's
# latent norms): the ops of that kind around an rsqrt (here, siblings without shapes; ``attribution/norm_ops``).
NORM_OPS = r"^aten::(to|_to_copy|type_as|pow|square|mean|add|rsqrt|mul)$"
RESHAPE_NAMES = (
    r"^aten::(view|reshape|_unsafe_view|unflatten|split|split_with_sizes|chunk|unbind|slice|narrow|select|"
    r"contiguous|permute|transpose|t|numpy_T|mT|clone|expand|unsqueeze|squeeze)$"
)
# Stages whose named ops (op rules of any context) are head ops of a block, whatever their shapes: they
# only ever work on q, k or v (SGLang's apply_qk_norm on [T, H * D] rows shows no head dim either).
NAMED_HEAD_STAGES = ("rope", "kv_cache", "qk_norm")
# Call ops that hold their own projections (nn.MultiheadAttention's fast path: in-projection, core and
# out-projection in one op on [B, S, E]): never widened, their query shows no head dim.
SELF_CONTAINED = r"^aten::_native_multi_head_attention$"


def find(con: duckdb.DuckDBPyConnection) -> None:
    """Create ``_eager_marks`` and ``_eager_pairs`` (needs ``_cpu``, ``_marked`` and ``_xm``)."""
    ((cores,),) = sqlmodules.fetch(con, "attribution/eager_cores", softmax=SOFTMAX, self_contained=SELF_CONTAINED)
    if not cores:
        sqlmodules.run(con, "attribution/eager_none")
        return
    sqlmodules.run(
        con,
        "attribution/eager_patterns",
        product=PRODUCT,
        max_gap_before=MAX_GAP_BEFORE,
        max_gap_after=MAX_GAP_AFTER,
        score_ops=SCORE_OPS,
    )
    sqlmodules.run(con, "attribution/eager_lift", product=PRODUCT)
    _block(con)
    sqlmodules.run(con, "attribution/eager_marks", unshaped_gap=UNSHAPED_GAP, bleed=link.BLEED_NS)


def _block(con: duckdb.DuckDBPyConnection) -> None:
    """Widen each shaped core to its attention block: an eager pattern (QK^T to PV) or a call op
    (itself), by the sibling ops right before and right after it that work on the heads: classify the
    siblings in reach, find the block's ends, then its span on the axis (the modules' headers say how)."""
    sqlmodules.run(
        con,
        "attribution/eager_block_classes",
        block_before=BLOCK_BEFORE,
        block_after=BLOCK_AFTER,
        comm_stage=TP_COMM,
        named_head_stages=NAMED_HEAD_STAGES,
        norm_ops=NORM_OPS,
        reshape_names=RESHAPE_NAMES,
    )
    sqlmodules.run(con, "attribution/eager_block_ends")
    sqlmodules.run(con, "attribution/eager_blocks")
