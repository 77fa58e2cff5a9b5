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
``UNSHAPED_GAP`` ops between the products and the softmax).

Each pattern becomes a call mark (``kind = 'eager'``, impl ``eager``) whose
scope is the time from the first product's start to the second product's end
on that thread, widened with recorded shapes to the attention block around it
(``_block``: the projections, head reshapes, rotary embedding and KV-cache
update before the core, the output projection after it); inside it the op
rules give the stages as in any call. The
call's id is the first product's op id (its ``mkey`` is the negated id, so it
does not collide with the op's own mark).
"""

from __future__ import annotations

import duckdb

from tracekit.model import link

SOFTMAX = r"^aten::(_?softmax|_safe_softmax)$"
# baddbmm: BLOOM's scores (alibi + Q @ K^T, its operands after the bias); einsum: 'bhid,bhjd->bhij'
# (its dims are a tensor list: shape checks do not apply, the unshaped gap does).
PRODUCT = r"^aten::(bmm|matmul|baddbmm|einsum)$"
# Sibling ops allowed between the QK^T product and the softmax (scale, mask,
# position bias, casts) and between the softmax and the PV product (dropout, casts).
MAX_GAP_BEFORE = 32
MAX_GAP_AFTER = 8
UNSHAPED_GAP = 3
# How far from the core a block's projections, rotary embedding and KV-cache update may sit (``_block``).
BLOCK_BEFORE = 128
BLOCK_AFTER = 16
HEAD_RESHAPE = r"^aten::(view|reshape|_unsafe_view|unflatten|split|split_with_sizes|chunk|unbind|slice|narrow|select|contiguous|permute|transpose|t|numpy_T|mT|clone|expand|unsqueeze|squeeze)$"
RULE = "eager: matmul -> softmax -> matmul"


def _gemm_widths(op: str) -> str:
    """SQL: the projection ``op``'s input and output widths (in and out features) as ``{i, o}``, NULL
    for an op that is no projection: linear / addmm / mm / _scaled_mm, x @ W.T (``weight_product``) or
    an output-first GEMM (``OUT_FIRST_GEMM``: vLLM's ``cutlass_scaled_mm(out, a, b, ...)``)."""

    def dims(i: str, o: str) -> str:
        return f"""struct_pack(i := TRY_CAST({op}.input_dims->>'{i}' AS BIGINT),
                               o := TRY_CAST({op}.input_dims->>'{o}' AS BIGINT))"""

    return f"""CASE WHEN {op}.name = 'aten::linear' THEN {dims("$[0][#-1]", "$[1][0]")}
                   WHEN {op}.name = 'aten::addmm' THEN {dims("$[1][#-1]", "$[2][1]")}
                   WHEN {op}.name IN ('aten::mm', 'aten::_scaled_mm') OR {weight_product(op)}
                        THEN {dims("$[0][#-1]", "$[1][1]")}
                   WHEN regexp_matches({op}.name, '{OUT_FIRST_GEMM}') THEN {dims("$[1][#-1]", "$[0][#-1]")}
              END"""


def weight_product(op: str) -> str:
    """SQL: whether the cpu_slices row ``op`` is a linear layer written as ``x @ W.T`` (Falcon): a
    matmul of activations with 3+ dims by a 2-D weight, a projection and not one of the core's products."""
    return f"""({op}.name = 'aten::matmul' AND json_array_length({op}.input_dims->'$[0]') >= 3
                AND json_array_length({op}.input_dims->'$[1]') = 2)"""


# GEMMs whose output tensor is their first argument (its last dim: the out features).
OUT_FIRST_GEMM = r"(?i)(^|::)cutlass_scaled_mm$"
# Ops that convert values without changing what they are (quantization): they neither end a block nor start one.
CONVERSION = r"(?i)(^|::|_)(de)?quant(ize)?(_|$)"  # static_scaled_fp8_quant, aten::quantize_per_tensor; not quantile
# A tensor-parallel output projection's reduction (vLLM's vllm::all_reduce, c10d::allreduce_, a
# reduce-scatter under sequence parallelism): right after the block's last projection, it is the block's.
TP_REDUCTION = r"(?i)all_?reduce|reduce_?scatter"
# Stages whose named ops (op rules of any context) are head ops of a block, whatever their shapes.
NAMED_HEAD_STAGES = ("rope", "kv_cache")
BLOCK_RULE = "block: a call op widened to its projections, head reshapes, RoPE and KV cache by shape"


def _dim(dims: str, arg: int, index: int) -> str:
    """SQL: dimension ``index`` (negative: from the end) of argument ``arg`` of an Input Dims JSON."""
    path = f"$[{arg}][#{index}]" if index < 0 else f"$[{arg}][{index}]"
    return f"TRY_CAST(json_extract_string({dims}, '{path}') AS BIGINT)"


def _operand_dim(op: str, operand: int, index: int) -> str:
    """SQL: dimension ``index`` of the product ``op``'s ``operand`` (0: left, 1: right); baddbmm's
    operands follow its bias, an einsum's are a list (NULL: not compared)."""
    return f"""CASE WHEN {op}.name = 'aten::baddbmm' THEN {_dim(f"{op}.input_dims", operand + 1, index)}
                    WHEN {op}.name = 'aten::einsum' THEN NULL
                    ELSE {_dim(f"{op}.input_dims", operand, index)} END"""


def siblings(parents: str, columns: str) -> str:
    """SQL: the CPU ops that share a thread and a parent with a row of ``parents`` (a query giving
    ``lane, parent_id``), each with its ``id``, ``lane``, ``parent_id``, ``columns`` (of ``s``:
    cpu_slices, ``c``: _cpu) and ``i``, its number among its siblings in axis order. Ops near each
    other are then found by their numbers: an equality join, where a range join on a parent with many
    children would be a nested loop."""
    return f"""SELECT s.id, c.lane, s.parent_id, {columns},
                      row_number() OVER (PARTITION BY c.lane, s.parent_id ORDER BY c.pos) AS i
               FROM cpu_slices s JOIN _cpu c USING (id)
               WHERE s.kind = 'cpu_op'
                 AND (c.lane, coalesce(s.parent_id, -1)) IN (SELECT lane, coalesce(parent_id, -1) FROM ({parents}))"""


def find(con: duckdb.DuckDBPyConnection) -> None:
    """Create ``_eager_marks`` and ``_eager_pairs`` (needs ``_cpu``, ``_marked`` and ``_xm``)."""
    # Outermost softmax ops outside every call.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_sm AS
            SELECT s.id, s.parent_id, c.lane, c.pos, s.input_dims
            FROM cpu_slices s JOIN _cpu c USING (id)
            LEFT JOIN cpu_slices p ON p.id = s.parent_id
            -- The pattern is matched per distinct op name, not per row.
            WHERE s.kind = 'cpu_op'
              AND s.name IN (SELECT name FROM (SELECT DISTINCT name FROM cpu_slices WHERE kind = 'cpu_op')
                             WHERE regexp_matches(name, '{SOFTMAX}'))
              AND NOT coalesce(regexp_matches(p.name, '{SOFTMAX}'), false)
              AND s.id NOT IN (SELECT x.x FROM _xm x JOIN _marked m ON m.mkey = x.mkey WHERE m.is_call)"""
    )
    # Outermost ops that mark a call themselves (SDPA, flash_attn, a serving op) with a recorded query
    # of 3 or more dims: unlabelled, the call is the op alone until ``_block`` widens it.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _op_core AS
            SELECT id, name, parent_id, lane, {_dim("dims", 0, -1)} AS d, qrank,
                   {_dim("dims", 0, 0)} AS qb, {_dim("dims", 0, 1)} AS qh,
                   -- [B, H, S, D]'s S; a [T, H, D] query's dims do not give S.
                   CASE WHEN qrank = 4 THEN {_dim("dims", 0, 2)} END AS sq,
                   CASE WHEN qrank = 4 THEN {_dim("dims", 1, -2)} END AS skv
            FROM (
                SELECT m.id, s.name, s.parent_id, c.lane, s.input_dims AS dims,
                       json_array_length(s.input_dims->'$[0]') AS qrank
                FROM _marked m JOIN cpu_slices s USING (id) JOIN _cpu c USING (id)
                WHERE m.is_call AND m.kind = 'cpu_op' AND s.input_dims IS NOT NULL
                  -- A backward op's siblings are autograd's nodes, not its forward's block.
                  AND NOT regexp_matches(s.name, '_backward')
                  AND m.id NOT IN (SELECT x.x FROM _xm x JOIN _marked o ON o.mkey = x.mkey
                                   WHERE o.is_call AND o.mkey <> x.x)
            ) WHERE qrank >= 3 AND {_dim("dims", 0, -1)} > 0"""
    )
    if not con.execute(  # type: ignore[index]
        "SELECT (SELECT count(*) FROM _eager_sm) + (SELECT count(*) FROM _op_core)"
    ).fetchone()[0]:
        _empty(con)
        return
    # The siblings of the softmaxes and of the call ops, numbered in order.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_sib AS
            {
            siblings(
                "SELECT lane, parent_id FROM _eager_sm UNION SELECT lane, parent_id FROM _op_core",
                "s.name, s.input_dims, s.ts_ns, s.end_ns, c.pos, c.k0, c.k1",
            )
        }"""
    )
    sm_last = _dim("c.input_dims", 0, -1)
    sm_rows = _dim("c.input_dims", 0, -2)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_found AS
            WITH sm AS (
                SELECT e.id, e.lane, b.i, e.input_dims, e.parent_id FROM _eager_sm e JOIN _eager_sib b USING (id)
            ),
            -- The siblings around each softmax by their numbers (an equality join: a range join on a
            -- parent with many children, or none, is a nested loop).
            near AS (
                SELECT sm.id AS sm_id, sm.i AS sm_i, b.id, b.i
                FROM (SELECT sm.*, unnest(range(greatest(sm.i - {MAX_GAP_BEFORE + 1}, 1), sm.i + {MAX_GAP_AFTER + 2}))
                             AS j FROM sm) sm
                JOIN _eager_sib b
                  ON b.lane = sm.lane AND coalesce(b.parent_id, -1) = coalesce(sm.parent_id, -1) AND b.i = sm.j
                WHERE regexp_matches(b.name, '{PRODUCT}')
            ),
            qk AS (  -- the nearest product before the softmax, with no other softmax between
                SELECT sm_id, arg_max(id, i) AS qk_id, max(i) AS qk_i FROM near WHERE i < sm_i GROUP BY sm_id
            ),
            pv AS (  -- the nearest product after it
                SELECT sm_id, arg_min(id, i) AS pv_id, min(i) AS pv_i FROM near WHERE i > sm_i GROUP BY sm_id
            ),
            cand AS (
                SELECT sm.id AS sm_id, sm.i AS sm_i, sm.input_dims, qk.qk_id, qk.qk_i, pv.pv_id, pv.pv_i
                FROM sm JOIN qk ON qk.sm_id = sm.id JOIN pv ON pv.sm_id = sm.id
                -- (differences, not comparisons, so DuckDB plans a hash join: see attribution._gpu_label)
                WHERE NOT EXISTS (SELECT 1 FROM sm o WHERE o.lane = sm.lane
                                  AND o.parent_id IS NOT DISTINCT FROM sm.parent_id
                                  AND o.i - qk.qk_i > 0 AND pv.pv_i - o.i > 0 AND o.id <> sm.id)
            )
            SELECT c.*, a.name AS qk_name, z.name AS pv_name, n.name AS sm_name,
                   a.lane, a.pos AS qk_pos, a.k0, z.k1, a.ts_ns, z.end_ns,
                   {sm_last} AS skv, {sm_rows} AS sq,
                   {_operand_dim("a", 0, -2)} AS a_rows, {_operand_dim("a", 0, -1)} AS a_inner,
                   {_operand_dim("a", 1, -2)} AS b_inner, {_operand_dim("a", 1, -1)} AS b_cols,
                   {_operand_dim("z", 0, -2)} AS p_rows, {_operand_dim("z", 0, -1)} AS p_inner,
                   {_operand_dim("z", 1, -2)} AS v_rows
            FROM cand c JOIN _eager_sib a ON a.id = c.qk_id JOIN _eager_sib z ON z.id = c.pv_id
            JOIN _eager_sib n ON n.id = c.sm_id"""
    )
    _block(con)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_marks AS
            SELECT qk_id AS id, -qk_id AS mkey, 'eager' AS kind, (qk_pos - 0.5)::DOUBLE AS pos,
                   NULL::VARCHAR AS stage, true AS is_call, 'eager' AS impl, 'any' AS context, 'outer' AS scope,
                   NULL::INTEGER AS causal_arg, '{RULE}' AS rule,
                   qk_name || ' > ' || sm_name || ' > ' || pv_name AS op, lane, k0, k1, ts_ns, end_ns
            FROM _eager_found
            WHERE CASE WHEN skv IS NULL OR a_rows IS NULL OR p_rows IS NULL
                       THEN sm_i - qk_i - 1 <= {UNSHAPED_GAP} AND pv_i - sm_i - 1 <= {UNSHAPED_GAP}
                       ELSE a_inner = b_inner AND b_cols = skv AND a_rows = sq
                            AND p_inner = skv AND p_rows = sq AND v_rows = skv END"""
    )
    # A call op widened to its block: a mark that only scopes the call (no stage, not a call of its own in
    # attention_calls). Its id is the op's, so the call keeps the op's id, source and impl; it sits before
    # the op on the axis, so the block's ops are in the call's context.
    con.execute(
        f"""INSERT INTO _eager_marks
            SELECT o.id, -o.id, 'block', (w.pos - 0.5)::DOUBLE, NULL, true, NULL, 'any', 'outer', NULL,
                   '{BLOCK_RULE}', o.name, o.lane, w.k0, w.k1, w.ts_ns, w.end_ns
            FROM _op_core o JOIN _eager_win w ON w.qk_id = o.id WHERE w.widened"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_pairs AS
            SELECT x, key AS mkey FROM ({link.inside("_eager_marks", "mkey")})"""
    )
    for t in (
        "_eager_sm",
        "_op_core",
        "_eager_sib",
        "_eager_found",
        "_blk_core",
        "_eager_cls",
        "_eager_ends",
        "_eager_win",
    ):
        con.execute(f"DROP TABLE {t}")


def _block(con: duckdb.DuckDBPyConnection) -> None:
    """Widen each shaped core to its attention block: an eager pattern of ``_eager_found`` (QK^T to
    PV) or a call op of ``_op_core`` (itself), by the sibling ops right before and right after it
    that work on the heads.

    With recorded shapes and the core's head dim D, each sibling within ``BLOCK_BEFORE`` /
    ``BLOCK_AFTER`` ops is one of:

    - ``P``, a projection: linear / addmm / mm / _scaled_mm, x @ W.T (a matmul with a 2-D right
      operand) or an output-first GEMM (``OUT_FIRST_GEMM``), with out features a multiple of D;
    - ``B``, a head op: a tensor of 3+ dims whose last is D or D/2 (q, k, v, rotate_half's halves,
      the cos/sin tables); a ``[B, H, S, ...]`` / ``[B, S, H, ...]`` of 4+ dims whose H divides the
      query's heads (grouped KV heads: Qwen3's k_norm statistics ``[B, S, Hkv, 1]``; GPT-J's
      interleaved rotation stacks pairs, ``[B, S, H, r / 2, 2]``) or whose H * S is the query's
      (Hugging Face's SDPA path for grouped KV heads may pass q as ``[B, Hkv, n * S, D]``: Gemma 3's
      q_norm statistics ``[B, H, S, 1]`` then match neither H nor S); a partial rotary's
      ``[B, S, r]`` table (r even, below D); or an op a rule names rope or kv_cache
      (``NAMED_HEAD_STAGES``: vLLM's ``[T, H * D]`` rows show no head dim);
    - ``G``, a reshape of heads (``HEAD_RESHAPE``: view, split, slice, transpose, ... of a tensor
      whose last dim is a multiple of D);
    - ``N``, neither end nor start: an op on no tensor of 2+ dims (empty, scalar casts), a
      quantization (``CONVERSION``) or a constant multiple of a ``[.., n * D]`` tensor (OPT's q
      pre-scale);
    - ``R``, a tensor-parallel reduction (``TP_REDUCTION``);
    - ``X``, anything else (a norm, a residual add, an MLP op); but not an X between two projections
      that read the same width (after the previous block), on tensors as wide as the first one's
      output or its per-row statistics: that works on what the projection made (OLMo-2's q_norm
      and k_norm over ``[B, S, H * D]`` rows between q_proj, k_proj and v_proj), and does not count.

    The block starts at the first P or B after the last X or R before the core (Hugging Face Llama:
    q/k/v_proj, their view + transpose, the rotary embedding, the KV-cache cat) and ends at the
    first projection after the core when no X or R comes before it (o_proj), with the R right after
    it if there is one (a row-parallel o_proj's all-reduce, inside vLLM's and Megatron's attention
    modules), else at the last head op.
    A residual dropout after o_proj is the layer's (GPT-NeoX, BART, ViT keep it outside their
    attention modules, GPT-2 and GPT-J inside), and stays out.
    It never reaches into a neighbouring core's block. Without shapes (or with an einsum, whose
    head dim is not read) an eager pattern stays product to product and a call op itself. Inside
    the block the op rules and positions give qkv_proj, rope, kv_cache, layout and out_proj as in a
    labelled call."""
    shapes = (
        r"list_transform(regexp_extract_all(CAST(b.input_dims AS VARCHAR), '\[(-?[0-9]+(, ?-?[0-9]+)*)\]', 1), "
        r"lambda x: CAST(string_split(replace(x, ' ', ''), ',') AS BIGINT[]))"
    )
    # The cores: each pattern (QK^T to PV) and each call op (itself), with what its shapes say.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _blk_core AS
            SELECT f.qk_id, f.qk_i, f.pv_i, f.lane, q.parent_id, f.a_inner AS d, f.sq, f.skv,
                   {_operand_dim("q", 0, 0)} AS qb, {_operand_dim("q", 0, 1)} AS qh,
                   json_array_length(CASE WHEN q.name = 'aten::baddbmm' THEN q.input_dims->'$[1]'
                                          ELSE q.input_dims->'$[0]' END) AS qrank,
                   coalesce(f.a_inner > 0 AND f.skv IS NOT NULL, false) AS shaped
            FROM _eager_found f JOIN _eager_sib q ON q.id = f.qk_id
            UNION ALL
            SELECT o.id, b.i, b.i, o.lane, o.parent_id, o.d, o.sq, o.skv, o.qb, o.qh, o.qrank, true
            FROM _op_core o JOIN _eager_sib b USING (id)"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _eager_cls AS
            WITH f AS (
                SELECT f.*, lag(f.pv_i) OVER w AS prev_pv_i, lead(f.qk_i) OVER w AS next_qk_i
                FROM _blk_core f
                WINDOW w AS (PARTITION BY f.lane, f.parent_id ORDER BY f.qk_i)
            ),
            -- The window's sibling numbers, joined by equality (a range join would be a nested loop).
            idx AS (
                SELECT f.*, unnest(list_concat(
                           range(greatest(f.qk_i - {BLOCK_BEFORE}, coalesce(f.prev_pv_i, 0) + 1), f.qk_i),
                           range(f.pv_i + 1, least(f.pv_i + {BLOCK_AFTER + 1}, coalesce(f.next_qk_i, f.pv_i + {BLOCK_AFTER + 1})))))
                           AS i
                FROM f WHERE f.shaped  -- (every core bounds its neighbours' windows, shaped or not)
            ),
            rows AS (
                SELECT x.*, b.name, b.input_dims, {shapes} AS shapes, {_gemm_widths("b")} AS gemm, om.m.stage AS named
                FROM idx x JOIN _eager_sib b
                  ON b.lane = x.lane AND coalesce(b.parent_id, -1) = coalesce(x.parent_id, -1) AND b.i = x.i
                LEFT JOIN _op_match om ON om.name = b.name
            )
            -- (A projection's widths, the last dims of the others before the core: see _eager_ends.)
            SELECT qk_id, qk_i, pv_i, i, prev_pv_i, cls, CASE WHEN cls = 'P' THEN gemm END AS gemm,
                   CASE WHEN cls = 'X' AND i < qk_i THEN list_distinct(list_transform(shapes, lambda s: s[-1])) END
                       AS last_dims
            FROM (
            SELECT *,
                   CASE WHEN gemm.o > 0 AND gemm.o % d = 0 THEN 'P'
                        WHEN regexp_matches(name, '{TP_REDUCTION}') THEN 'R'
                        -- An op a rule names a rotary embedding or a KV-cache write (vLLM's _C::rotary_embedding
                        -- and reshape_and_cache_flash work on [T, H * D] rows: no head dim in their shapes).
                        WHEN named IN {NAMED_HEAD_STAGES} THEN 'B'
                        WHEN len(list_filter(shapes, lambda s: len(s) >= 3 AND (s[-1] = d OR 2 * s[-1] = d)
                                 OR len(s) >= 4 AND qrank = 4 AND s[1] IN (qb, 1)
                                    -- (CASE, not AND: DuckDB evaluates both sides, and a 0 dim, an empty KV cache, divides by zero)
                                    AND (CASE WHEN s[2] > 0 THEN qh % s[2] = 0 END AND s[3] IN (sq, skv)
                                         OR s[2] IN (sq, skv) AND CASE WHEN s[3] > 0 THEN qh % s[3] = 0 END
                                         -- heads folded into the op's rows (GQA by reshape: q as [B, Hkv, n * S, D])
                                         OR s[2] * s[3] = qh * sq)
                                 -- a partial rotary's cos/sin table: [B, S, r], r even and below D
                                 OR len(s) = 3 AND s[2] IN (sq, skv) AND s[3] > 0 AND s[3] < d AND s[3] % 2 = 0)) > 0
                             THEN 'B'
                        WHEN regexp_matches(name, '{HEAD_RESHAPE}') AND heads_wide THEN 'G'
                        WHEN len(list_filter(shapes, lambda s: len(s) >= 2)) = 0 THEN 'N'
                        -- A value conversion (fp8 quantization of q before the attention op) is neither.
                        WHEN regexp_matches(name, '{CONVERSION}') THEN 'N'
                        -- q scaled by a constant right after its projection (OPT, BART): [B, S, n * D] times a scalar.
                        WHEN regexp_matches(name, '^aten::(mul|div)_?$') AND json_array_length(input_dims) >= 2
                             AND json_array_length(input_dims->'$[1]') = 0 AND heads_wide THEN 'N'
                        ELSE 'X' END AS cls
            -- A tensor of 2+ dims whose last is a multiple of D (heads side by side, or all of them).
            FROM (SELECT *, len(list_filter(shapes, lambda s: len(s) >= 2 AND s[-1] % d = 0)) > 0 AS heads_wide
                  FROM rows)
            ) r"""
    )
    # The end first (after the core), then the start, which stays after the previous block's end.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _eager_ends AS
           WITH after AS (
               SELECT qk_id,
                      min(i) FILTER (WHERE i > pv_i AND cls IN ('X', 'R')) AS first_x,
                      min(i) FILTER (WHERE i > pv_i AND cls = 'P') AS first_p
               FROM _eager_cls GROUP BY qk_id
           ),
           ends AS (
               SELECT w.qk_id, w.pv_i,
                      CASE WHEN a.first_p < coalesce(a.first_x, 9e18)
                           -- (with the reduction right after it, if any)
                           THEN a.first_p + count(*) FILTER (WHERE w.i = a.first_p + 1 AND w.cls = 'R')
                           ELSE coalesce(max(w.i) FILTER (WHERE w.i > w.pv_i AND w.cls = 'B'
                                                          AND w.i < coalesce(a.first_x, 9e18)
                                                          AND w.i < coalesce(a.first_p, 9e18)), w.pv_i) END AS end_i
               FROM _eager_cls w JOIN after a USING (qk_id) GROUP BY w.qk_id, w.pv_i, a.first_p, a.first_x
           ),
           prev AS (  -- where the block before it on the thread ends
               SELECT f.qk_id, lag(coalesce(e.end_i, f.pv_i)) OVER (PARTITION BY f.lane, f.parent_id ORDER BY f.qk_i)
                          AS prev_end
               FROM _blk_core f LEFT JOIN ends e USING (qk_id)
           ),
           -- Before the core, each op's nearest projections on either side (after the previous block): an X
           -- between two that read the same width, on tensors as wide as the first one's output (or its
           -- per-row statistics), works on what that projection made (OLMo-2's q_norm over [B, S, H * D]
           -- rows, between q_proj and k_proj), not on the layer's hidden state.
           near AS (
               SELECT w.qk_id, w.i, w.cls, w.last_dims,
                      last_value(CASE WHEN w.cls = 'P' AND w.i > coalesce(p.prev_end, -1) THEN w.gemm END IGNORE NULLS)
                          OVER (PARTITION BY w.qk_id ORDER BY w.i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS p_before,
                      first_value(CASE WHEN w.cls = 'P' THEN w.gemm.i END IGNORE NULLS)
                          OVER (PARTITION BY w.qk_id ORDER BY w.i ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS w_after
               FROM _eager_cls w JOIN prev p USING (qk_id)
               WHERE w.i < w.qk_i AND w.cls IN ('P', 'X', 'R')
           ),
           bound AS (
               SELECT qk_id,
                      max(i) FILTER (WHERE cls = 'R' OR cls = 'X' AND NOT coalesce(p_before.i = w_after
                                                                                   AND list_has_all([p_before.o, 1], last_dims), false))
                          AS last_x
               FROM near GROUP BY qk_id
           ),
           starts AS (
               SELECT w.qk_id, min(w.i) AS start_i
               FROM _eager_cls w JOIN bound b USING (qk_id)
               WHERE w.i < w.qk_i AND w.cls IN ('P', 'B') AND w.i > coalesce(b.last_x, -1)
               GROUP BY w.qk_id
           )
           SELECT f.qk_id, coalesce(s.start_i, f.qk_i) AS start_i, coalesce(e.end_i, f.pv_i) AS end_i, p.prev_end
           FROM _blk_core f LEFT JOIN ends e USING (qk_id) LEFT JOIN starts s USING (qk_id) JOIN prev p USING (qk_id)"""
    )
    # Each core's block (``_eager_win``): never into the one before it on its thread; its first and last
    # sibling's place on the axis and times; ``widened`` when it holds more than the core.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _eager_win AS
           WITH w AS (
               SELECT w.qk_id, f.qk_i, f.pv_i, f.lane, f.parent_id, w.end_i,
                      greatest(w.start_i, coalesce(w.prev_end, -1) + 1) AS start_i
               FROM _eager_ends w JOIN _blk_core f USING (qk_id)
           )
           SELECT w.qk_id, w.start_i < w.qk_i OR w.end_i > w.pv_i AS widened,
                  a.pos, a.k0, z.k1, a.ts_ns, z.end_ns
           FROM w
           JOIN _eager_sib a ON a.lane = w.lane AND coalesce(a.parent_id, -1) = coalesce(w.parent_id, -1)
                             AND a.i = w.start_i
           JOIN _eager_sib z ON z.lane = w.lane AND coalesce(z.parent_id, -1) = coalesce(w.parent_id, -1)
                             AND z.i = w.end_i"""
    )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _eager_found AS
           SELECT f.* REPLACE (w.pos AS qk_pos, w.k0 AS k0, w.k1 AS k1, w.ts_ns AS ts_ns, w.end_ns AS end_ns)
           FROM _eager_found f JOIN _eager_win w USING (qk_id)"""
    )


def _empty(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _eager_marks (
               id BIGINT, mkey BIGINT, kind VARCHAR, pos DOUBLE, stage VARCHAR, is_call BOOLEAN, impl VARCHAR,
               context VARCHAR, scope VARCHAR, causal_arg INTEGER, rule VARCHAR, op VARCHAR, lane BIGINT,
               k0 BIGINT, k1 BIGINT, ts_ns BIGINT, end_ns BIGINT)"""
    )
    con.execute("CREATE OR REPLACE TEMP TABLE _eager_pairs (x BIGINT, mkey BIGINT)")
    con.execute("DROP TABLE _eager_sm")
    con.execute("DROP TABLE _op_core")
