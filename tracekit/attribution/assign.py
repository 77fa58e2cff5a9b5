"""Attention-stage attribution: every CPU slice and GPU op gets a stage.

Layers, most trusted first (each row records which one decided, ``source``):

1. ``label``: the innermost enclosing ``record_function`` range whose name
   matches a rule of ``rule_label_stages`` with a stage (the capture module's
   ``stage:<stage>``, or the user's own patterns). A GPU op is inside a range
   when the call that launched it is (the NVTX projection rule). GPU ops whose
   launch is not in the trace fall back to Kineto's ``gpu_user_annotation``
   ranges (``gpu_annotation``).
2. ``op``: the launching op stack, by ``rule_op_stages``: the outermost op
   below the attention call that has a stage rule decides, so the Memcpy an
   out-of-place ``masked_fill`` launches is ``mask`` and every kernel under
   ``aten::_scaled_dot_product_flash_attention`` is ``fused_attention`` -
   except that rules with scope ``inner`` (KV-cache writes, rotary
   embeddings) decide for their own subtree wherever they sit.
   Rules with context ``call`` (softmax, mul, bmm, linear, ...) apply only
   inside an attention call; ``matmul`` becomes ``qk_matmul`` or
   ``pv_matmul`` by its position around the call's softmax, ``proj``
   becomes ``qkv_proj`` or ``out_proj`` around the call's core.
3. ``kernel``: kernel-name rules (``rule_kernel_stages``), for GPU ops the
   first two layers left undecided: CUDA/HIP-graph replays, where one launch
   owns hundreds of kernels, and orphans.

Then a training step's backward (``backward``): autograd's nodes take the
decision of the forward op with their ``Sequence number``, and each forward
call gets one backward call (``backward.propagate``).

Everything else is ``other`` with source ``none``. An attention call is the
outermost range or op a rule marks as a call (``attention:<impl>``,
``attn_fwd``, ``aten::scaled_dot_product_attention``, ...); an attention
kernel found by name outside any call is a call of its own.
"""

from __future__ import annotations

import duckdb

from tracekit.attribution import backward, eager, kernel_blocks, scopes
from tracekit.common import names, sqlmodules, sqltext
from tracekit.schema import stages

CORE_STAGES = stages.core()
# Kernel-level time counts these stages' kernels, plus any kernel a rule names an attention kernel.
KERNEL_LEVEL_STAGES = stages.kernel_level()
# Stored: the rows a rule or call decided (most slices and GPU ops of a trace are other/none);
# cpu_stages and gpu_op_stages are views (store/sql/model_views) that add every other row over cpu_slices/gpu_ops.
TABLES = ("cpu_stage_decisions", "gpu_op_stage_decisions", "attention_calls")
# The core ends with its last product (PV), softmax or fused kernel: scale/mask/dropout after it are the output block's.
PRODUCTS = ("matmul", "qk_matmul", "pv_matmul", "softmax", "fused_attention")
# Ops whose rules' stages only say what they compute: where they sit in their call says which stage
# they are (``attribution/resolved_stage``). ``rotate`` (aten::neg, sub, view_as_complex/view_as_real/polar) is
# the sign of a rotary embedding applied by plain ops (Hugging Face's rotate_half, x1 * cos - x2 * sin as
# DeepSeek's and ChatGLM's code writes it, Meta's complex form).
ROPE_OPS = ("scale", "mask", "rotate")
NORM_REACH = 6  # how far from its rsqrt a norm's op may sit (Gemma 3's weight multiply: 4 after)
NORM_RULE = "norm: an RMSNorm written in ops (rsqrt and the casts, pow, mean, add, mul beside it)"
# The stage lists the position rules read.
_POSITIONS = {"core": ("matmul", *CORE_STAGES), "products": PRODUCTS}


def build(con: duckdb.DuckDBPyConnection, temp: bool = False) -> None:
    """Create cpu_stage_decisions, gpu_op_stage_decisions and attention_calls (the views over them,
    cpu_stages and gpu_op_stages, are the model's: store/sql/model_views).

    Needs the link step's working tables ``_cpu`` (positions) and ``_anc``
    (container ancestors); ``temp=True`` creates TEMP tables, which shadow a
    read-only database's own (used when the user passes other rules). The working
    tables the steps leave are dropped by the build (``sqlmodules.drop_private``).
    """
    kind = "TEMP TABLE" if temp else "TABLE"
    if temp:
        for t in TABLES:
            con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    _match_names(con)
    scopes.scopes(con)
    _cpu_stages(con, kind)
    _gpu_op_stages(con, kind)
    sqlmodules.run(con, "attribution/call_defs")
    sqlmodules.run(con, "attribution/attention_calls", table=kind)


def _match_names(con) -> None:
    """The first matching rule per distinct label, op, kernel and Python frame name."""
    sqlmodules.run(con, "attribution/label_match")
    sqlmodules.run(con, "attribution/op_match")
    # Itanium-mangled kernel names (ROCm, some CUDA libraries) are matched demangled.
    mangled = sqlmodules.fetch(con, "attribution/mangled_kernels")
    sqltext.insert_rows(con, "_demangled", [(n, names.demangle(n)) for (n,) in mangled])
    sqlmodules.run(con, "attribution/kernel_match")
    scopes.match(con)


def _cpu_stages(con, kind: str) -> None:
    """cpu_stage_decisions: the marks (labels, ops, module scopes, eager patterns, decomposed norms), each
    slice's deciding mark, the calls' anchors, and the stages resolved by them; then the backward."""
    sqlmodules.run(con, "attribution/slice_marks")
    # Eager attention (matmul -> softmax -> matmul) where nothing marks a call.
    eager.find(con)
    sqlmodules.run(con, "attribution/slice_calls")
    sqlmodules.run(con, "attribution/norm_ops", norm_ops=eager.NORM_OPS, reach=NORM_REACH, rule=NORM_RULE)
    sqlmodules.run(con, "attribution/op_facts", stages=("concat", "matmul", *ROPE_OPS))
    sqlmodules.run(con, "attribution/slice_stages", comm_stage=eager.TP_COMM)
    sqlmodules.run(con, "attribution/call_anchors", rope_ops=ROPE_OPS, **_POSITIONS)
    # Position-bias tables read by the heads (Swin, T5), with what makes their index and shapes them.
    ((tables,),) = sqlmodules.fetch(con, "attribution/bias_tables")
    if tables:
        sqlmodules.run(con, "attribution/bias_slices", reshape_names=eager.RESHAPE_NAMES)
    else:
        sqlmodules.run(con, "attribution/bias_none")
    sqlmodules.run(con, "attribution/cpu_stage_decisions", table=kind, rope_ops=ROPE_OPS)
    # A training step's backward: each autograd node takes its forward op's stage and call's backward call.
    backward.propagate(con)


def _gpu_op_stages(con, kind: str) -> None:
    """gpu_op_stage_decisions: each GPU op's decision from its launch, GPU annotation or kernel rule, then
    the blocks a stream's kernel order shows around attention kernels no CPU call holds (graph replays,
    compiled regions)."""
    sqlmodules.run(con, "attribution/gpu_labels")
    sqlmodules.run(
        con,
        "attribution/gpu_decisions",
        cpu_sources=("label", "module", "op", backward.SOURCE),
        kernel_level=KERNEL_LEVEL_STAGES,
        rope_ops=ROPE_OPS,
        **_POSITIONS,
    )
    kernel_blocks.find(con, "_gpu_decisions")
    sqlmodules.run(con, "attribution/gpu_op_stage_decisions", table=kind, comm_stage=eager.TP_COMM)
