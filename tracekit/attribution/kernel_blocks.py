"""Attention blocks found in a GPU stream's kernel sequence, where no CPU op tells them.

A CUDA/HIP-graph replay (one ``hipGraphLaunch`` owns a decode step's hundreds of kernels) or a
compiled region (``Torch-Compiled Region`` launches every kernel of the graph) leaves the kernel
name as the only fact about a GPU op: the attention kernel is found by name (a call of its own,
source ``kernel``), and the projections, q/k norms and copies around it were ``other``. On one
stream, an attention layer runs in a fixed order, and this module reads it from the sequence:

    ... GEMM (qkv_proj) [norms, rotary, KV-cache writes, copies] ATTENTION [copies] GEMM (out_proj) [all-reduce (tp_comm)]

For each run of adjacent attention kernels of one implementation with no CPU call (a paged
kernel and its split-KV reduction are one call; helper kernels beside it join it), going back: the non-GEMM kernels up to the
nearest GEMM, at most ``PRE_REACH`` of them, then that GEMM and the GEMMs right before it
(separate q, k and v projections; at most ``QKV_GEMMS``); going forward: at most ``POST_REACH``
kernels up to the next GEMM, that GEMM, and a collective right after it (the tensor-parallel all-reduce,
stage ``tp_comm`` as every communication kernel a projection takes in: ``attribution/gpu_op_stage_decisions``).
Projections that other kernels keep apart (inductor fuses a projection's bias add into the next
q/k-norm kernel) are found further back: GEMMs of the adjacent group's own kernel names, up to a
norm kernel (``EXT_REACH``). No GEMM within reach: no widening on that side (a call is never
widened over kernels it cannot bound). The walk stops at
a kernel some other layer decided (a label, module, op or another call), a copy or memset, a
collective, the previous call's block and a backward attention kernel's run (backward runs the
layer in reverse: its GEMMs around the kernel are the other projections' gradients).

The same walk widens a CPU call that holds an attention kernel and lacks a projection on a side (that
side only: the ops decided the other), over kernels of graph replays only: vLLM's piecewise CUDA graphs run the attention op eagerly between two replays
that hold the QKV GEMM before it and the o_proj GEMM after it. Kernels that ops launched are the
op layers' (the block search by ops, ``eager``), so a plain eager trace is not read this way.

A GEMM is a kernel whose ``rule_op_categories`` kernel category is ``GEMM`` (a user folder's
rows first, as in ``op_summary``). The kernels between are: their kernel rule's stage where it
names one (``rope``, ``kv_cache``, ``layout``, and a ``call``-context rule now that they are in a
call), a norm kernel before the core ``qk_norm``, else ``layout``. Decided here: source
``sequence``; by their kernel rule, still ``kernel``.

The steps are ``attribution/kernel_block_*`` modules; ``find`` runs them in order.
"""

from __future__ import annotations

import duckdb

from tracekit.common import sqlmodules

PRE_REACH = 12  # non-GEMM kernels between the QKV GEMM and the attention kernel (SGLang's Qwen3 decode: 6)
POST_REACH = 4  # kernels between the attention kernel and the output GEMM
EXT_REACH = 16  # kernels before the adjacent QKV group that may hold its earlier projections (FLUX: 13)
QKV_GEMMS = 6  # consecutive GEMMs before the middle: q, k, v (and a joint block's second q, k, v)
SOURCE = "sequence"
BACKWARD_KERNEL = r"(?i)bwd|backward|bprop|dgrad|wgrad"
# Kernel-rule stages that say only what a kernel computes: its side of the core says which stage.
POSITIONAL = ("proj", "matmul", "norm")


def find(con: duckdb.DuckDBPyConnection, decisions: str) -> None:
    """Create ``_kblock`` (id, call_id, stage, source, rule, attention_kernel): the GPU ops that
    the kernel-sequence blocks of ``decisions`` (rows of every GPU op: id, stage, source,
    call_id) take in, and the attention kernels whose call merges into the run's first."""
    ((streams,),) = sqlmodules.fetch(con, "attribution/kernel_block_streams", decisions=decisions)
    if not streams:
        return
    ((cpu_calls,),) = sqlmodules.fetch(
        con,
        "attribution/kernel_block_sequence",
        decisions=decisions,
        backward_kernel=BACKWARD_KERNEL,
    )
    # The bounds of a CPU call's block cost five more window aggregates: only when such a call exists.
    graph = "attribution/graph_nearest_kernels" if cpu_calls else "attribution/no_graph_nearest_kernels"
    sqlmodules.run(
        con,
        "attribution/kernel_block_runs",
        pre_reach=PRE_REACH,
        post_reach=POST_REACH,
        qkv_gemms=QKV_GEMMS,
        graph_nearest=graph,
    )
    sqlmodules.run(con, "attribution/kernel_block_extend", ext_reach=EXT_REACH)
    sqlmodules.fetch(con, "attribution/kernel_block_place", source=SOURCE, positional=POSITIONAL)
