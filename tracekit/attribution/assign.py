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
from tracekit.common import names, sqltext
from tracekit.common.sqltext import literal
from tracekit.schema import stages

CORE_STAGES = stages.core()
# Kernel-level time counts these stages' kernels, plus any kernel a rule names an attention kernel.
KERNEL_LEVEL_STAGES = stages.kernel_level()
# Stored: the rows a rule or call decided (most slices and GPU ops of a trace are other/none);
# cpu_stages and gpu_op_stages are views (VIEWS) that add every other row over cpu_slices/gpu_ops.
TABLES = ("cpu_stage_decisions", "gpu_op_stage_decisions", "attention_calls")
# What a GPU op not in gpu_op_stage_decisions has (the view's defaults).
_GPU_UNDECIDED = "stage = 'other' AND source = 'none' AND call_id IS NULL AND rule IS NULL AND kernel_impl IS NULL"
VIEWS = {
    "cpu_stages": """
        SELECT s.id, s.trace_id, s.kind, s.name, coalesce(d.stage, 'other') AS stage,
               coalesce(d.source, 'none') AS source, d.call_id, d.decider_id, d.rule, s.self_ns
        FROM cpu_slices s LEFT JOIN cpu_stage_decisions d ON d.id = s.id""",
    "gpu_op_stages": """
        SELECT g.id, g.trace_id, g.kind, g.name, coalesce(d.stage, 'other') AS stage,
               coalesce(d.source, 'none') AS source, d.call_id, d.rule,
               coalesce(d.attention_kernel, false) AS attention_kernel, d.kernel_impl, g.orphan, g.dur_ns
        FROM gpu_ops g LEFT JOIN gpu_op_stage_decisions d ON d.id = g.id""",
}
# The core ends with its last product (PV), softmax or fused kernel: scale/mask/dropout after it are the output block's.
PRODUCTS = ("matmul", "qk_matmul", "pv_matmul", "softmax", "fused_attention")


# Kernel rules see the kernel's name demangled (names.demangle: ``_ZN...`` as ROCm
# reports many kernels) and without template and parameter lists (the kernel_base
# macro): argument types (``flashinfer::QuantizationSFLayout``) are not what it does.
# composable_kernel launches every kernel through ``ck_tile::kentry<..., Kernel>``: there the
# kernel is the template argument.
KERNEL_BASE = (
    "CASE WHEN regexp_matches(kernel_base(n.text), '(^|[: ])kentry$') "
    "THEN kernel_base(regexp_replace(n.text, '^[^<]*<', '')) ELSE kernel_base(n.text) END"
)


def _rule_value(column: str, name: str) -> str:
    """A rule cell, where ``\\1`` means the pattern's first group in the name."""
    return f"CASE WHEN r.{column} = '\\1' THEN regexp_extract({name}, r.pattern, 1) ELSE nullif(r.{column}, '') END"


def build(con: duckdb.DuckDBPyConnection, temp: bool = False) -> None:
    """Create cpu_stage_decisions, gpu_op_stage_decisions and attention_calls (the views ``VIEWS``
    over them are the model's).

    Needs the link step's working tables ``_cpu`` (positions) and ``_anc``
    (container ancestors); ``temp=True`` creates TEMP tables, which shadow a
    read-only database's own (used when the user passes other rules).
    """
    kind = "TEMP TABLE" if temp else "TABLE"
    if temp:
        for t in TABLES:
            con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    _match_names(con)
    scopes.scopes(con)
    _cpu_stages(con, kind)
    _gpu_op_stages(con, kind)
    _attention_calls(con, kind)
    for t in (
        "_label_match",
        "_op_match",
        "_kernel_match",
        "_module_match",
        "_marked",
        "_xm",
        "_anchor",
        "_scope_marks",
        "_scope_pairs",
        "_eager_marks",
        "_eager_pairs",
        "_bw_call",
    ):
        con.execute(f"DROP TABLE IF EXISTS {t}")


def _match_names(con) -> None:
    stage_impl = f"stage := {_rule_value('stage', 'n.name')}, impl := {_rule_value('impl', 'n.name')}"
    sqltext.first_match(
        con,
        "_label_match",
        "SELECT DISTINCT name FROM cpu_slices WHERE kind = 'user_annotation' "
        "UNION SELECT DISTINCT name FROM events WHERE kind = 'gpu_user_annotation'",
        "rule_label_stages",
        f"{stage_impl}, is_call := r.call = 'yes', context := 'any', scope := 'outer', causal_arg := NULL::INTEGER",
    )
    sqltext.first_match(
        con,
        "_op_match",
        "SELECT DISTINCT name FROM cpu_slices WHERE kind = 'cpu_op'",
        "rule_op_stages",
        f"{stage_impl}, is_call := r.call = 'yes', context := r.context, scope := r.scope, "
        "causal_arg := TRY_CAST(nullif(r.causal_arg, '') AS INTEGER)",
    )
    # Itanium-mangled kernel names (ROCm, some CUDA libraries) are matched demangled.
    mangled = con.execute(
        "SELECT DISTINCT name FROM gpu_ops WHERE starts_with(name, '_Z') OR starts_with(name, '__Z')"
    ).fetchall()
    pairs = [(n, names.demangle(n)) for (n,) in mangled]
    con.execute("CREATE OR REPLACE TEMP TABLE _demangled (name VARCHAR, text VARCHAR)")
    sqltext.insert_rows(con, "_demangled", pairs)
    sqltext.first_match(
        con,
        "_kernel_match",
        "SELECT DISTINCT g.name, coalesce(d.text, g.name) AS text FROM gpu_ops g LEFT JOIN _demangled d USING (name)",
        "rule_kernel_stages",
        f"{stage_impl}, context := r.context, attention := r.attention = 'yes'",
        subject=KERNEL_BASE,
    )
    con.execute("DROP TABLE _demangled")
    scopes.match(con)


# Ops whose rules' stages only say what they compute: where they sit in their call says which stage
# they are (``resolve``). ``rotate`` (aten::neg, sub, view_as_complex/view_as_real/polar) is the sign
# of a rotary embedding applied by plain ops (Hugging Face's rotate_half, x1 * cos - x2 * sin as
# DeepSeek's and ChatGLM's code writes it, Meta's complex form).
_ROPE_OPS = ("scale", "mask", "rotate")
_NEVER = "9e18"  # a position after every position (positions are row numbers)


def anchors(stage: str, pos: str, facts: str | None = None) -> str:
    """SQL: the aggregates (grouped by call) of the positions ``resolve`` compares with, over decided
    ``stage``s at ``pos``: the first softmax, the first matmul, the start of the core, its first and
    last product (``product_pos``, ``core_end_pos``), the first projection and the first rotation
    (not an op on tensors below 3-D, by its ``facts``: position arithmetic is not a rotation).
    ``rope_anchors`` adds the rest."""
    core = ", ".join(map(literal, ("matmul", *CORE_STAGES)))
    products = ", ".join(map(literal, PRODUCTS))
    return f"""min({pos}) FILTER (WHERE {stage} = 'softmax') AS softmax_pos,
               min({pos}) FILTER (WHERE {stage} = 'matmul') AS first_matmul_pos,
               min({pos}) FILTER (WHERE {stage} IN ({core})) AS core_pos,
               min({pos}) FILTER (WHERE {stage} IN ({products})) AS product_pos,
               max({pos}) FILTER (WHERE {stage} IN ({products})) AS core_end_pos,
               min({pos}) FILTER (WHERE {stage} IN ('proj', 'qkv_proj')) AS first_proj_pos,
               min({pos}) FILTER (WHERE {stage} = 'rotate' AND NOT {_fact(facts, "low_rank")}) AS rotate_pos"""


def _fact(facts: str | None, name: str) -> str:
    """SQL: the deciding op's fact ``name`` (a column of ``_op_facts``) from the struct ``facts``; false without."""
    return "false" if facts is None else f"coalesce({facts}.{name}, false)"


def _rope_candidate(stage: str, pos: str, a: str, positional: str, nested: str, facts: str | None) -> str:
    """SQL: whether a decided ``stage`` is part of a rotary embedding applied by plain ops: a
    scale/mask (mul, div, add) or rotate op that a generic rule decided (``positional``), before
    the call's first product, in a call that rotates before it, not inside an op that is an
    attention call itself (``nested``: SDPA's math backend scales q and k before its first product),
    and not an op whose recorded inputs are all below 3-D (a KV cache's position arithmetic)."""
    before = f"coalesce({a}.product_pos, {_NEVER})"
    return f"""({stage} IN ({", ".join(map(literal, _ROPE_OPS))}) AND {positional} AND NOT coalesce({nested}, false)
               AND NOT {_fact(facts, "low_rank")} AND {a}.rotate_pos < {before} AND {pos} < {before})"""


def rope_anchors(con, table: str, stage: str, pos: str, positional: str, nested: str, facts: str) -> None:
    """Add to the anchors ``table`` (one row per call, from ``anchors``) what a rotary embedding
    applied by plain ops changes, from the decided rows of ``_xstage``: the span of its ops
    (``rope_lo``, ``rope_hi``), and ``core_pos`` without them (its muls are not the core's scale)."""
    candidate = _rope_candidate(stage, pos, "a", positional, nested, facts)
    core = ", ".join(map(literal, ("matmul", *CORE_STAGES)))
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE {table} AS
            -- A call that does not rotate has no row in r, and keeps its core_pos.
            SELECT a.* REPLACE (CASE WHEN r.call_id IS NULL THEN a.core_pos ELSE r.core_pos END AS core_pos),
                   r.rope_lo, r.rope_hi
            FROM {table} a LEFT JOIN (
                SELECT x.call_id,
                       min({pos}) FILTER (WHERE {candidate}) AS rope_lo,
                       max({pos}) FILTER (WHERE {candidate}) AS rope_hi,
                       min({pos}) FILTER (WHERE {stage} IN ({core}) AND NOT {candidate}) AS core_pos
                FROM _xstage x JOIN {table} a ON a.call_id = x.call_id
                WHERE a.rotate_pos IS NOT NULL GROUP BY x.call_id
            ) r ON r.call_id = a.call_id"""
    )


def resolve(stage: str, pos: str, anchor: str, positional: str, nested: str = "false", facts: str | None = None) -> str:
    """SQL: a decided stage with the position-dependent ones resolved.

    ``matmul`` is qk_matmul before the call's softmax and pv_matmul after it
    (without a softmax: the first matmul is QK^T); ``proj`` is qkv_proj before
    the call's first product or fused op (its core when it has neither) and out_proj after
    it; ``norm`` is pre_norm before the call's first projection, qk_norm between the projections and the core,
    and out_proj after the core (the output block's norm). When
    ``positional`` holds (a generic op or module decided, not a label),
    scale/mask/dropout ops after the core belong to the output block
    (out_proj: the residual add, the output dropout). In a call that rotates
    (``rotate``: aten::neg, view_as_complex, ...) before its first product,
    the scale/mask ops before that product are its rotary embedding
    (``rope``: q * cos + rotate_half(q) * sin), and so are the layout ops
    among them (rotate_half's cat); ``nested`` marks rows inside an op that
    is an attention call itself, which keep their stage. A ``concat`` that
    appends along the sequence axis (``_SEQ_APPEND``) before the core's
    first product is a KV-cache update (``kv_cache``); otherwise layout.
    ``facts``: the deciding op's row of ``_op_facts`` as a struct (None: no
    op facts, as for kernels).
    """
    a = anchor
    rope = _rope_candidate(stage, pos, a, positional, nested, facts)
    in_rope = f"({positional} AND NOT coalesce({nested}, false) AND {pos} > {a}.rope_lo AND {pos} < {a}.rope_hi)"
    return f"""CASE WHEN {rope} THEN 'rope' ELSE CASE {stage}
        WHEN 'matmul' THEN
            CASE WHEN {a}.softmax_pos IS NOT NULL
                 THEN CASE WHEN {pos} < {a}.softmax_pos THEN 'qk_matmul' ELSE 'pv_matmul' END
                 WHEN {a}.first_matmul_pos IS NULL OR {pos} <= {a}.first_matmul_pos THEN 'qk_matmul'
                 ELSE 'pv_matmul' END
        -- Before the core's first product (or fused op): a pre-scale of q (OPT, BART) comes between the projections.
        WHEN 'proj' THEN
            CASE WHEN coalesce({a}.product_pos, {a}.core_pos) IS NULL OR {pos} < coalesce({a}.product_pos, {a}.core_pos)
                 THEN 'qkv_proj' ELSE 'out_proj' END
        WHEN 'norm' THEN
            CASE WHEN {a}.core_end_pos IS NOT NULL AND {pos} > {a}.core_end_pos THEN 'out_proj'
                 WHEN {a}.first_proj_pos IS NOT NULL AND {pos} > {a}.first_proj_pos THEN 'qk_norm'
                 ELSE 'pre_norm' END
        WHEN 'scale' THEN CASE WHEN {positional} AND {pos} > {a}.core_end_pos THEN 'out_proj' ELSE 'scale' END
        WHEN 'mask' THEN CASE WHEN {positional} AND {pos} > {a}.core_end_pos THEN 'out_proj' ELSE 'mask' END
        WHEN 'dropout' THEN CASE WHEN {positional} AND {pos} > {a}.core_end_pos THEN 'out_proj' ELSE 'dropout' END
        -- A rotation after the core's first product is not a rotary embedding.
        WHEN 'rotate' THEN 'other'
        WHEN 'layout' THEN CASE WHEN {in_rope} THEN 'rope' ELSE 'layout' END
        WHEN 'concat' THEN
            CASE WHEN {in_rope} THEN 'rope'
                 WHEN {_fact(facts, "appends")} AND {pos} < coalesce({a}.product_pos, {_NEVER}) THEN 'kv_cache'
                 ELSE 'layout' END
        ELSE {stage} END END"""


# A concatenation that appends to 4-D [batch, heads, seq, head_dim] tensors along the sequence axis: a
# KV cache growing (Hugging Face DynamicCache: cat([keys, new], dim=-2); StaticCache: index_copy_(2, ...)).
# The dim is the op's second argument either way; a trace without shapes cannot tell, and keeps layout.
_SEQ_APPEND = """TRY_CAST(s.concrete_inputs->>'$[1]' AS INTEGER) IN (2, -2)
                 AND regexp_matches(s.input_dims::VARCHAR, '\\[-?\\d+,-?\\d+,-?\\d+,-?\\d+\\]')"""
# Recorded inputs, none of them a tensor of 3 or more dimensions: not q or k (a KV cache's position
# arithmetic, StaticCache's cache_position + 1). NULL without shapes.
_LOW_RANK = "NOT regexp_matches(s.input_dims::VARCHAR, '\\[-?\\d+,-?\\d+,-?\\d+')"


# An RMSNorm written in plain ops (Hugging Face's Qwen3, Gemma 3, OLMo-2 q_norm and k_norm, DeepSeek's
# latent norms): x.to(float32), pow(2), mean, + eps, rsqrt, x * that, .to(dtype), * weight (Gemma:
# * (1 + weight)). The ops of that kind around an rsqrt, up to the first op of another kind on either side.
NORM_OPS = r"^aten::(to|_to_copy|type_as|pow|square|mean|add|rsqrt|mul)$"
NORM_REACH = 6  # how far from its rsqrt a norm's op may sit (Gemma 3's weight multiply: 4 after)
NORM_RULE = "norm: an RMSNorm written in ops (rsqrt and the casts, pow, mean, add, mul beside it)"


def _decomposed_norms(con) -> None:
    """Mark the ops of each RMSNorm written in plain ops inside an attention call (``NORM_OPS`` around
    an ``aten::rsqrt``) as stage ``norm``, scope inner, so their op rules' ``scale`` / ``mask`` /
    ``layout`` give way: by position, a norm between the projections and the core is ``qk_norm``,
    one before them ``pre_norm``, one after the core ``out_proj``; and its multiplies no longer pass
    for a rotary embedding's. Adds rows to ``_marked`` and ``_xm`` (needs ``_xcall``)."""
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _norm_ops AS
            WITH r AS (  -- each rsqrt in a call, not inside an op that is a call itself
                SELECT s.id, s.parent_id, c.lane FROM cpu_slices s JOIN _cpu c USING (id) JOIN _xcall x ON x.x = s.id
                WHERE s.kind = 'cpu_op' AND s.name = 'aten::rsqrt' AND NOT x.in_call_op
            ),
            sib AS ({eager.siblings("SELECT lane, parent_id FROM r", f"c.pos, regexp_matches(s.name, '{NORM_OPS}') AS normish")}),
            -- The siblings within reach of each rsqrt (its id: rid), and the nearest of another kind on either side.
            near AS (
                SELECT a.id AS rid, a.i AS ri, b.id, b.pos, b.i,
                       max(CASE WHEN b.i < a.i AND NOT b.normish THEN b.i END) OVER (PARTITION BY a.id) AS lo,
                       min(CASE WHEN b.i > a.i AND NOT b.normish THEN b.i END) OVER (PARTITION BY a.id) AS hi
                FROM (SELECT a.*, unnest(range(a.i - {NORM_REACH}, a.i + {NORM_REACH + 1})) AS j
                      FROM r JOIN sib a USING (id)) a
                JOIN sib b ON b.lane = a.lane AND coalesce(b.parent_id, -1) = coalesce(a.parent_id, -1) AND b.i = a.j
            )
            SELECT DISTINCT id, pos FROM near WHERE i > coalesce(lo, -1) AND i < coalesce(hi, 9e18)"""
    )
    con.execute(
        f"""INSERT INTO _marked
            SELECT id, -id, 'cpu_op', pos::DOUBLE, 'norm', false, NULL, 'call', 'inner', NULL, '{NORM_RULE}'
            FROM _norm_ops"""
    )
    # The marks cover each op, what it calls and the runtime calls they make (as _xm's own marks do).
    con.execute(
        """INSERT INTO _xm
           WITH cm AS (
               SELECT id, -id AS mkey FROM _norm_ops
               UNION ALL SELECT a.id, -a.aid FROM _anc a JOIN _norm_ops n ON n.id = a.aid
           )
           SELECT id, mkey FROM cm
           UNION ALL
           SELECT s.id, cm.mkey FROM cpu_slices s JOIN cm ON cm.id = s.parent_id WHERE s.kind IN ('runtime', 'driver')"""
    )
    con.execute("DROP TABLE _norm_ops")


def _cpu_stages(con, kind: str) -> None:
    # Slices a rule marks (labels and ops), with their position on the axis,
    # and the module scopes a rule marks.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _marked AS
           SELECT c.id, c.id AS mkey, c.kind, c.pos::DOUBLE AS pos, m.m.stage, m.m.is_call, m.m.impl, m.m.context,
                  m.m.scope, m.m.causal_arg, m.m.rule
           FROM _cpu c
           JOIN (SELECT name, m, 'user_annotation' AS kind FROM _label_match
                 UNION ALL SELECT name, m, 'cpu_op' FROM _op_match) m
             ON m.name = c.name AND m.kind = c.kind
           UNION ALL
           SELECT id, mkey, kind, pos, stage, is_call, impl, context, scope, causal_arg, rule FROM _scope_marks"""
    )
    # Each CPU slice with its marked ancestors-or-self; runtime calls (leaves)
    # take their parent's; every slice inside a marked module scope.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _xm AS
           WITH cm AS (
               SELECT a.id, a.aid AS mkey FROM _anc a JOIN _marked m ON m.mkey = a.aid AND m.kind <> 'module'
               UNION ALL SELECT id, mkey FROM _marked WHERE kind <> 'module'
           )
           SELECT cm.id AS x, cm.mkey FROM cm
           UNION ALL
           SELECT s.id, cm.mkey FROM cpu_slices s JOIN cm ON cm.id = s.parent_id
           WHERE s.kind IN ('runtime', 'driver')
           UNION ALL
           SELECT x, sid FROM _scope_pairs"""
    )
    # Eager attention (matmul -> softmax -> matmul) where nothing marks a call.
    eager.find(con)
    con.execute(
        """INSERT INTO _marked
           SELECT id, mkey, kind, pos, stage, is_call, impl, context, scope, causal_arg, rule FROM _eager_marks"""
    )
    con.execute("INSERT INTO _xm SELECT x, mkey FROM _eager_pairs")
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _xcall AS
           SELECT x.x, arg_min(m.id, m.pos) AS call_id, min(m.pos) AS call_pos,
                  -- Inside (or itself) an op that marks a call: SDPA's math backend, a fused op.
                  bool_or(m.kind = 'cpu_op') AS in_call_op
           FROM _xm x JOIN _marked m ON m.mkey = x.mkey WHERE m.is_call GROUP BY x.x"""
    )
    _decomposed_norms(con)
    # What the position rules need of an op's arguments, for the ops in calls they may resolve.
    ops = ", ".join(map(literal, ("concat", "matmul", *_ROPE_OPS)))
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _op_facts AS
            SELECT s.id, {_SEQ_APPEND} AS appends, {_LOW_RANK} AS low_rank, {eager.weight_product("s")} AS weight_product
            FROM cpu_slices s
            WHERE s.id IN (SELECT id FROM _marked WHERE stage IN ({ops}) AND id IN (SELECT x FROM _xcall))"""
    )
    # Per slice and layer, the deciding mark's row of _marked (its rowid), looked up once the layer is
    # chosen: an arg_max of the decision itself (a struct of its stage, id, position and rule) cost
    # x22 0.27 of 0.31 CPU-s here (one thread), the strings copied into the states row by row.
    in_context = "(m.context = 'any' OR m.pos >= c.call_pos)"
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _xdecide AS
            SELECT x.x, c.call_id, c.in_call_op,
                   arg_max(m.rowid, m.pos)
                       FILTER (WHERE m.kind = 'user_annotation' AND m.stage IS NOT NULL) AS by_label,
                   arg_max(m.rowid, m.pos)
                       FILTER (WHERE m.kind = 'module' AND m.stage IS NOT NULL AND {in_context}) AS by_module,
                   arg_max(m.rowid, m.pos)
                       FILTER (WHERE m.kind = 'cpu_op' AND m.stage IS NOT NULL AND m.scope = 'inner'
                               AND {in_context}) AS by_inner_op,
                   arg_min(m.rowid, m.pos)
                       FILTER (WHERE m.kind = 'cpu_op' AND m.stage IS NOT NULL AND m.scope <> 'inner'
                               AND {in_context}) AS by_outer_op
            FROM _xm x JOIN _marked m ON m.mkey = x.mkey LEFT JOIN _xcall c ON c.x = x.x
            GROUP BY x.x, c.call_id, c.in_call_op"""
    )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _xstage AS
           SELECT x.x, x.call_id, x.in_call_op,
                  CASE WHEN m.rowid IS NOT NULL
                       -- x @ W.T (Falcon's linear) is a projection, not one of the core's products.
                       THEN struct_pack(stage := CASE WHEN m.stage = 'matmul' AND f.weight_product THEN 'proj'
                                                      ELSE m.stage END,
                                        decider := m.id, pos := m.pos, rule := m.rule,
                                        appends := f.appends, low_rank := f.low_rank) END AS d,
                  CASE WHEN by_label IS NOT NULL THEN 'label'
                       WHEN by_module IS NOT NULL THEN 'module'
                       WHEN coalesce(by_inner_op, by_outer_op) IS NOT NULL THEN 'op' END AS source
           FROM _xdecide x
           LEFT JOIN _marked m ON m.rowid = coalesce(x.by_label, x.by_module, x.by_inner_op, x.by_outer_op)
           LEFT JOIN _op_facts f ON f.id = m.id"""
    )
    # matmul / proj / norm are told apart by where their decider sits in the call.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _anchor AS
            SELECT call_id, {anchors("d.stage", "d.pos", "d")}
            FROM _xstage WHERE call_id IS NOT NULL GROUP BY call_id"""
    )
    # Stages resolved over the decided slices only, then joined onto every slice.
    positional = "x.source IN ('op', 'module')"
    rope_anchors(con, "_anchor", "x.d.stage", "x.d.pos", positional, "x.in_call_op", "x.d")
    stage = resolve("x.d.stage", "x.d.pos", "a", positional, "x.in_call_op", "x.d")
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _xresolved AS
            SELECT x.x, {stage} AS stage, x.source, x.call_id, x.d.decider AS decider_id, x.d.rule
            FROM _xstage x LEFT JOIN _anchor a ON a.call_id = x.call_id"""
    )
    con.execute(
        f"""
        CREATE {kind} cpu_stage_decisions AS
        SELECT x.x AS id, c.trace_id, x.stage, x.source, x.call_id, x.decider_id, x.rule
        FROM _xresolved x JOIN _cpu c ON c.id = x.x
        -- A slice under a marked op or scope that decided nothing and has no call is other/none.
        WHERE x.stage IS NOT NULL OR x.source IS NOT NULL OR x.call_id IS NOT NULL OR x.decider_id IS NOT NULL
           OR x.rule IS NOT NULL
        """
    )
    for t in ("_xcall", "_xdecide", "_xstage", "_xresolved", "_op_facts"):
        con.execute(f"DROP TABLE {t}")
    # A training step's backward: each autograd node takes its forward op's stage and call's backward call.
    backward.propagate(con)


def _gpu_op_stages(con, kind: str) -> None:
    # GPU ops without a launch (orphans, no-correlation ops): Kineto's projection of the annotations onto the
    # GPU stream is the only label they can have.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _gpu_label AS
           SELECT g.id,
                  arg_max(struct_pack(stage := m.m.stage, rule := m.m.rule), a.ts_ns)
                      FILTER (WHERE m.m.stage IS NOT NULL) AS d
           FROM gpu_ops g
           -- Containment is a filter over the equality join, written as differences so DuckDB does not
           -- plan a range join: on some inputs (six post variants in one file) duckdb 2.0 picks a merge
           -- join it cannot run ("Unimplemented join type for merge join"). Annotations per pid are few.
           JOIN events a ON a.kind = 'gpu_user_annotation' AND a.trace_id = g.trace_id AND a.pid = g.pid
                        AND g.ts_ns - a.ts_ns >= 0 AND a.end_ns - g.end_ns >= 0
           JOIN _label_match m ON m.name = a.name
           WHERE g.launch_id IS NULL
           GROUP BY g.id"""
    )
    core = ", ".join(map(literal, KERNEL_LEVEL_STAGES))
    # A kernel rule's matmul/proj/norm is resolved by the launch's position in its call.
    kernel_stage = resolve("km.stage", "launch_pos", "a", "true")
    cpu_decided = f"cpu_source IN ('label', 'module', 'op', '{backward.SOURCE}')"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _gdec AS
        WITH k AS (
            SELECT g.id, g.trace_id, g.kind, g.name, g.dur_ns, g.orphan, c.stage AS cpu_stage, c.source AS cpu_source,
                   c.call_id, c.rule AS cpu_rule, gl.d AS gpu_label, km.m AS km, p.pos::DOUBLE AS launch_pos
            FROM gpu_ops g
            LEFT JOIN cpu_stage_decisions c ON c.id = g.launch_id
            -- Only a launch inside a call needs its position (no call: no anchors to compare with).
            LEFT JOIN (SELECT id, pos FROM _cpu
                       WHERE id IN (SELECT id FROM cpu_stage_decisions WHERE call_id IS NOT NULL)) p
                   ON p.id = g.launch_id
            LEFT JOIN _gpu_label gl ON gl.id = g.id
            LEFT JOIN _kernel_match km ON km.name = g.name
        ),
        d AS (
            SELECT *,
                   CASE WHEN {cpu_decided} THEN cpu_source
                        WHEN gpu_label.stage IS NOT NULL THEN 'gpu_annotation'
                        WHEN km.stage IS NOT NULL AND (km.context = 'any' OR call_id IS NOT NULL) THEN 'kernel'
                        ELSE 'none' END AS source
            FROM k
        ),
        -- Kernel-decided positions join the call's anchors (inductor launches its GEMMs with no op).
        ka AS (
            SELECT call_id, {anchors("km.stage", "launch_pos")}
            FROM d WHERE source = 'kernel' AND call_id IS NOT NULL GROUP BY call_id
        ),
        a AS (
            SELECT coalesce(c.call_id, k.call_id) AS call_id,
                   least(c.softmax_pos, k.softmax_pos) AS softmax_pos,
                   least(c.first_matmul_pos, k.first_matmul_pos) AS first_matmul_pos,
                   least(c.core_pos, k.core_pos) AS core_pos,
                   greatest(c.core_end_pos, k.core_end_pos) AS core_end_pos,
                   least(c.first_proj_pos, k.first_proj_pos) AS first_proj_pos,
                   least(c.product_pos, k.product_pos) AS product_pos,
                   least(c.rotate_pos, k.rotate_pos) AS rotate_pos,
                   c.rope_lo, c.rope_hi
            FROM _anchor c FULL OUTER JOIN ka k ON k.call_id = c.call_id
        ),
        s AS (
            SELECT d.*,
                   CASE WHEN {cpu_decided} THEN cpu_stage
                        WHEN source = 'gpu_annotation' THEN gpu_label.stage
                        WHEN source = 'kernel' THEN {kernel_stage}
                        ELSE 'other' END AS stage
            FROM d LEFT JOIN a ON a.call_id = d.call_id
        )
        SELECT * FROM (
            SELECT id, trace_id, stage, source,
                   -- An attention kernel found by name outside any call is a call of its own.
                   coalesce(call_id, CASE WHEN source = 'kernel' AND km.stage = 'fused_attention' THEN id END)
                       AS call_id,
                   CASE WHEN {cpu_decided} THEN cpu_rule
                        WHEN source = 'gpu_annotation' THEN gpu_label.rule WHEN source = 'kernel' THEN km.rule END
                       AS rule,
                   kind = 'kernel' AND (coalesce(km.attention, false) AND (km.context = 'any' OR call_id IS NOT NULL)
                                        OR (source <> 'kernel' AND stage IN ({core})))
                       AS attention_kernel,
                   km.impl AS kernel_impl
            FROM s
        )
        """
    )
    con.execute("DROP TABLE _gpu_label")
    # Graph replays and compiled regions: the blocks a stream's kernel order shows around attention
    # kernels that no CPU call holds.
    kernel_blocks.find(con, "_gdec")
    con.execute(
        f"""
        CREATE {kind} gpu_op_stage_decisions AS
        SELECT * FROM (
            SELECT d.id, d.trace_id, coalesce(b.stage, d.stage) AS stage, coalesce(b.source, d.source) AS source,
                   coalesce(b.call_id, d.call_id) AS call_id, coalesce(b.rule, d.rule) AS rule,
                   coalesce(b.attention_kernel, d.attention_kernel) AS attention_kernel, d.kernel_impl
            FROM _gdec d LEFT JOIN _kblock b USING (id)
        ) WHERE NOT ({_GPU_UNDECIDED} AND attention_kernel IS NOT DISTINCT FROM false)
        """
    )
    con.execute("DROP TABLE _gdec")
    con.execute("DROP TABLE _kblock")


_SHAPE_COLUMNS = ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "batch_heads", "causal", "dtype")


def _from_forward(column: str) -> str:
    """SQL: ``column`` of an attention call, its forward call's for a backward call of its own (``_bw_call``)."""
    return f"CASE WHEN b.call_id IS NULL THEN c.{column} ELSE f.{column} END AS {column}"


def _attention_calls(con, kind: str) -> None:
    # What defines each call: a label or op (cpu_slices), a module scope
    # (python_functions) or an eager pattern (its span on the thread).
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _call_def AS
           SELECT m.id, s.trace_id, s.name AS op, CASE s.kind WHEN 'user_annotation' THEN 'label' ELSE 'op' END
                      AS call_source,
                  -- A call op widened to its block (eager.find's 'block' mark) spans the block, as a labelled call does.
                  coalesce(b.ts_ns, s.ts_ns) AS ts_ns, coalesce(b.end_ns - b.ts_ns, s.dur_ns) AS dur_ns, m.impl
           FROM _marked m JOIN cpu_slices s USING (id)
           LEFT JOIN _eager_marks b ON b.kind = 'block' AND b.id = m.id
           WHERE m.is_call AND m.kind IN ('user_annotation', 'cpu_op')
           UNION ALL
           SELECT m.id, m.trace_id, f.name, 'module', m.ts_ns, m.end_ns - m.ts_ns, m.impl
           FROM _scope_marks m JOIN python_functions f USING (id) WHERE m.is_call
           UNION ALL
           SELECT e.id, s.trace_id, e.op, 'eager', e.ts_ns, e.end_ns - e.ts_ns, e.impl
           FROM _eager_marks e JOIN cpu_slices s USING (id) WHERE e.kind = 'eager'"""
    )
    # A backward call of its own is defined by its forward call (its nodes' span on the CPU).
    con.execute(
        """INSERT INTO _call_def
           SELECT b.call_id, b.trace_id, f.op, f.call_source, b.ts_ns, b.dur_ns, f.impl
           FROM _bw_call b JOIN _call_def f ON f.id = b.fwd_call_id WHERE b.new"""
    )
    # A fused backward op's call holds its forward call's other nodes too: it spans them all.
    con.execute(
        """UPDATE _call_def SET ts_ns = b.ts_ns, dur_ns = b.dur_ns
           FROM _bw_call b WHERE b.call_id = _call_def.id AND NOT b.new"""
    )
    con.execute(
        f"""
        CREATE {kind} attention_calls AS
        -- Every slice and GPU op with a call is a decided one (cpu_stage_decisions, gpu_op_stage_decisions).
        WITH ids AS (
            SELECT DISTINCT call_id FROM cpu_stage_decisions WHERE call_id IS NOT NULL
            UNION SELECT DISTINCT call_id FROM gpu_op_stage_decisions WHERE call_id IS NOT NULL
        ),
        gpu AS (
            SELECT d.call_id, count(*) AS gpu_ops, sum(g.dur_ns)::BIGINT AS gpu_ns,
                   coalesce(sum(g.dur_ns) FILTER (WHERE d.attention_kernel), 0)::BIGINT AS attention_kernel_ns,
                   bool_and(g.orphan) AS orphan, min(d.kernel_impl) AS kernel_impl,
                   bool_or(d.stage IN ('qk_matmul', 'pv_matmul')) AND bool_or(d.stage = 'softmax') AS unfused
            FROM gpu_op_stage_decisions d JOIN gpu_ops g ON g.id = d.id WHERE d.call_id IS NOT NULL GROUP BY d.call_id
        ),
        cpu AS (
            SELECT call_id, bool_or(stage IN ('qk_matmul', 'pv_matmul')) AND bool_or(stage = 'softmax') AS unfused
            FROM cpu_stage_decisions WHERE call_id IS NOT NULL GROUP BY call_id
        ),
        -- The innermost marked op of the call that names an impl, and the
        -- op that carries the shapes (an SDPA op or backend).
        inner_ops AS (
            SELECT c.call_id,
                   arg_max(m.impl, m.pos) FILTER (WHERE m.kind = 'cpu_op' AND m.impl IS NOT NULL) AS op_impl,
                   arg_max(m.id, m.pos) FILTER (WHERE m.causal_arg IS NOT NULL) AS shape_op,
                   arg_max(m.causal_arg, m.pos) FILTER (WHERE m.causal_arg IS NOT NULL) AS causal_arg
            FROM cpu_stage_decisions c JOIN _marked m ON m.mkey = c.id
            WHERE c.call_id IS NOT NULL GROUP BY c.call_id
        ),
        -- Unfused calls: the first QK^T product (bmm / matmul) carries the shapes: the op that
        -- decided the stage, or under a stage:qk_matmul label the first matmul op inside it.
        -- (Two equality joins, not one join on an OR: that is a nested loop, 5-14 s on 1,764 eager calls.)
        qk AS (
            SELECT call_id, arg_min(id, pos) AS qk_op FROM (
                SELECT c.call_id, m.id, m.pos
                FROM cpu_stage_decisions c JOIN _marked m ON m.kind = 'cpu_op' AND m.mkey = c.decider_id
                WHERE c.stage = 'qk_matmul' AND c.source = 'op'
                UNION ALL
                SELECT c.call_id, m.id, m.pos
                FROM cpu_stage_decisions c JOIN _marked m ON m.kind = 'cpu_op' AND m.mkey = c.id AND m.stage = 'matmul'
                WHERE c.stage = 'qk_matmul' AND c.source = 'label'
            ) GROUP BY call_id
        ),
        calls AS (
            SELECT i.call_id, coalesce(cd.trace_id, gs.trace_id) AS trace_id,
                   coalesce(cd.op, gs.name) AS op, coalesce(cd.call_source, 'kernel') AS call_source,
                   coalesce(io.op_impl, g.kernel_impl, cd.impl,
                            CASE WHEN coalesce(g.unfused, false) OR coalesce(cp.unfused, false)
                                 THEN CASE WHEN cd.call_source IN ('module', 'eager') THEN 'eager' ELSE 'naive' END
                            END,
                            'unknown') AS impl,
                   coalesce(g.gpu_ops, 0) AS gpu_ops, coalesce(g.gpu_ns, 0) AS gpu_ns,
                   coalesce(g.attention_kernel_ns, 0) AS attention_kernel_ns,
                   cd.dur_ns AS cpu_ns, coalesce(cd.ts_ns, gs.ts_ns) AS ts_ns, coalesce(g.orphan, false) AS orphan,
                   -- A backward op (autograd's aten::*_backward) takes grad_out first, then query and key.
                   regexp_matches(coalesce(so.name, cd.op, ''), '_backward$') AS backward,
                   so.input_dims->(CASE WHEN regexp_matches(so.name, '_backward$') THEN '$[1]' ELSE '$[0]' END) AS q_dims,
                   so.input_dims->(CASE WHEN regexp_matches(so.name, '_backward$') THEN '$[2]' ELSE '$[1]' END) AS k_dims,
                   so.input_dims, so.input_types, so.concrete_inputs, io.causal_arg,
                   CASE WHEN so.id IS NOT NULL THEN NULL
                        WHEN regexp_matches(qo.name, '^aten::(bmm|matmul)$') THEN qo.input_dims
                        -- baddbmm(bias, batch1, batch2, ...): the product's operands follow the bias.
                        WHEN qo.name = 'aten::baddbmm' THEN json_array(qo.input_dims->'$[1]', qo.input_dims->'$[2]')
                   END AS qk_dims,
                   qo.input_types AS qk_types
            FROM ids i
            LEFT JOIN _call_def cd ON cd.id = i.call_id
            LEFT JOIN gpu_ops gs ON gs.id = i.call_id AND cd.id IS NULL
            LEFT JOIN gpu g ON g.call_id = i.call_id
            LEFT JOIN cpu cp ON cp.call_id = i.call_id
            LEFT JOIN inner_ops io ON io.call_id = i.call_id
            LEFT JOIN cpu_slices so ON so.id = io.shape_op
            LEFT JOIN qk ON qk.call_id = i.call_id
            LEFT JOIN cpu_slices qo ON qo.id = qk.qk_op
        ),
        shaped AS (
            SELECT call_id, trace_id, impl, op, call_source, gpu_ops, gpu_ns, attention_kernel_ns, cpu_ns, orphan, ts_ns,
                   CASE WHEN backward THEN 'backward' WHEN call_source <> 'kernel' THEN 'forward' END AS direction,
                   -- SDPA: query [B, H, Sq, D], key [B, Hkv, Skv, D]. A QK^T product: [B, H, Sq, D] x [B, H, D, Skv],
                   -- or a 3-D bmm [B*H, Sq, D] x [B*H, D, Skv] that does not tell B and H apart.
                   CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(q_dims->>'$[0]' AS BIGINT)
                        WHEN json_array_length(qk_dims->'$[0]') = 4 THEN TRY_CAST(qk_dims->>'$[0][0]' AS BIGINT)
                   END AS batch,
                   CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(q_dims->>'$[1]' AS BIGINT)
                        WHEN json_array_length(qk_dims->'$[0]') = 4 THEN TRY_CAST(qk_dims->>'$[0][1]' AS BIGINT)
                   END AS heads,
                   CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(k_dims->>'$[1]' AS BIGINT)
                        WHEN json_array_length(qk_dims->'$[1]') = 4 THEN TRY_CAST(qk_dims->>'$[1][1]' AS BIGINT)
                   END AS kv_heads,
                   CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(q_dims->>'$[2]' AS BIGINT)
                        ELSE TRY_CAST(qk_dims->>'$[0][#-2]' AS BIGINT) END AS seq_q,
                   CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(k_dims->>'$[2]' AS BIGINT)
                        ELSE TRY_CAST(qk_dims->>'$[1][#-1]' AS BIGINT) END AS seq_kv,
                   CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(q_dims->>'$[3]' AS BIGINT)
                        ELSE TRY_CAST(qk_dims->>'$[0][#-1]' AS BIGINT) END AS head_dim,
                   CASE WHEN input_dims IS NULL AND json_array_length(qk_dims->'$[0]') = 3
                        THEN TRY_CAST(qk_dims->>'$[0][0]' AS BIGINT) END AS bh_3d,
                   CASE lower(json_extract_string(concrete_inputs, '$[' || causal_arg || ']'))
                       WHEN 'true' THEN true WHEN 'false' THEN false END AS causal,
                   coalesce(json_extract_string(input_types, '$[0]'), json_extract_string(qk_types, '$[0]')) AS dtype
            FROM calls
        ),
        counted AS (
            SELECT call_id, trace_id, impl, op, call_source, gpu_ops, gpu_ns, attention_kernel_ns, cpu_ns, orphan,
                   ts_ns, batch, heads, kv_heads, seq_q, seq_kv, head_dim,
                   coalesce(batch * heads, bh_3d) AS batch_heads, causal, dtype,
                   -- FLOPs of the two matmuls (4*B*H*Sq*Skv*D), halved under a causal mask; a fused
                   -- backward does five (the scores again, dV, dP, dQ, dK): 2.5 times the forward's.
                   (4 * coalesce(batch * heads, bh_3d) * seq_q * seq_kv * head_dim
                      * CASE WHEN causal THEN 0.5 ELSE 1 END
                      * CASE WHEN direction = 'backward' THEN 2.5 ELSE 1 END)::BIGINT AS flops,
                   direction
            FROM shaped
        )
        -- A backward call of its own (autograd's nodes for an unfused forward call) has its
        -- forward call's impl and shapes, and four products (dV, dP, dQ, dK; no recompute):
        -- twice the forward's FLOPs.
        SELECT c.call_id, c.trace_id, {_from_forward("impl")}, c.op, c.call_source, c.gpu_ops, c.gpu_ns,
               c.attention_kernel_ns, c.cpu_ns, c.orphan, c.ts_ns,
               {", ".join(_from_forward(col) for col in _SHAPE_COLUMNS)},
               CASE WHEN b.call_id IS NULL THEN c.flops ELSE 2 * f.flops END AS flops,
               CASE WHEN b.call_id IS NULL THEN c.direction ELSE 'backward' END AS direction
        FROM counted c
        LEFT JOIN _bw_call b ON b.call_id = c.call_id AND b.new
        LEFT JOIN counted f ON f.call_id = b.fwd_call_id
        """
    )
    con.execute("DROP TABLE _call_def")
