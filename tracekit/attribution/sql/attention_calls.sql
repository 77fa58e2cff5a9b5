-- attention_calls: one row per attention call, with its cost, implementation and shapes (columns: docs/schema.md).
--
-- Every slice and GPU op with a call is a decided one. A call's impl is the innermost marked op of the call
-- that names one, its kernels' impl, its definition's, or for an unfused call (QK^T and PV products and a
-- softmax) eager (module and eager calls) or naive. The shapes come from the op that carries them (an SDPA
-- op or backend: query [B, H, Sq, D], key [B, Hkv, Skv, D]; a backward op takes grad_out first;
-- nn.MultiheadAttention's fast path op: query [B, S, E], key [B, Skv, E], the heads its num_head argument, else
-- its QK^T bmm's B * H over B), or for an unfused call from its first QK^T product (the op that decided the
-- stage, or under a stage:qk_matmul label the first matmul op inside it), else a varlen or paged op's query
-- [T, H, D] and key [T, Hkv, D] (heads and head dim only). Two equality joins find that product, not one join on an OR, which is a
-- nested loop. FLOPs: those of the two matmuls (4*B*H*Sq*Skv*D), halved under a causal mask; a fused backward
-- does five products (2.5 times the forward's). A backward call of its own (autograd's nodes for an unfused
-- forward call) has its forward call's impl and shapes, and four products (no recompute): twice the
-- forward's FLOPs.
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @reads cpu_stage_decisions, gpu_op_stage_decisions, gpu_ops, cpu_slices, _marked, _call_defs, _bw_call
-- @creates attention_calls
CREATE {{table}} attention_calls AS
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
-- The marks of each call's decided slices, read once by the three aggregates below.
call_marks AS MATERIALIZED (
    SELECT c.call_id, m.id, m.pos, m.kind, m.impl, m.is_call, m.causal_arg
    FROM cpu_stage_decisions c JOIN _marked m ON m.mkey = c.id
    WHERE c.call_id IS NOT NULL
),
-- The innermost marked op of the call that names an impl, and the
-- op that carries the shapes (an SDPA op or backend).
inner_ops AS (
    SELECT call_id,
           arg_max(impl, pos) FILTER (WHERE kind = 'cpu_op' AND impl IS NOT NULL) AS op_impl,
           arg_max(id, pos) FILTER (WHERE causal_arg IS NOT NULL) AS shape_op,
           arg_max(causal_arg, pos) FILTER (WHERE causal_arg IS NOT NULL) AS causal_arg
    FROM call_marks GROUP BY call_id
),
-- Unfused calls: the first QK^T product (bmm / matmul) carries the shapes: the op that
-- decided the stage, or under a stage:qk_matmul label the first matmul op inside it.
-- (Two equality joins, not one join on an OR: that is a nested loop, and slow on traces with many eager calls.)
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
-- The call ops without a shape argument, the only ones the next two read (a few per call, so only they
-- are joined to cpu_slices for their names and dimensions):
-- nn.MultiheadAttention's fast path (aten::_native_multi_head_attention): its query [B, S, E] and key
-- [B, Skv, E] carry the batch and lengths, its fifth argument (Concrete Inputs) the heads.
-- A varlen or paged attention op (flash_attn's varlen functions, vLLM's, aiter's): query [T, H, D] and key
-- [T, Hkv, D] over the batch's T tokens give the heads and head dim; the batch and lengths are in metadata
-- the trace does not record (they stay unknown).
call_ops AS (
    SELECT m.call_id,
           arg_min(s.id, s.ts_ns) FILTER (WHERE s.name = 'aten::_native_multi_head_attention') AS native_op,
           arg_max(s.input_dims, m.pos) FILTER (
               WHERE NOT regexp_matches(s.name, '_backward') AND s.name <> 'aten::_native_multi_head_attention'
                 AND json_array_length(s.input_dims->'$[0]') = 3 AND json_array_length(s.input_dims->'$[1]') = 3
                 AND s.input_dims->>'$[0][0]' = s.input_dims->>'$[1][0]'
                 AND s.input_dims->>'$[0][2]' = s.input_dims->>'$[1][2]') AS tk_dims
    FROM call_marks m JOIN cpu_slices s ON s.id = m.id
    WHERE m.kind = 'cpu_op' AND m.is_call AND m.causal_arg IS NULL
    GROUP BY m.call_id
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
           qo.input_types AS qk_types,
           nm.input_dims AS nm_dims, nm.input_types AS nm_types, co.tk_dims,
           coalesce(TRY_CAST(json_extract_string(nm.concrete_inputs, '$[4]') AS BIGINT),
                    -- without Concrete Inputs: its QK^T bmm's [B * H, Sq, D] over the query's B
                    CASE WHEN qo.name = 'aten::bmm' AND json_array_length(qo.input_dims->'$[0]') = 3
                              AND TRY_CAST(qo.input_dims->>'$[0][0]' AS BIGINT)
                                  % nullif(TRY_CAST(nm.input_dims->>'$[0][0]' AS BIGINT), 0) = 0
                         THEN TRY_CAST(qo.input_dims->>'$[0][0]' AS BIGINT)
                              // TRY_CAST(nm.input_dims->>'$[0][0]' AS BIGINT) END) AS nm_heads
    FROM ids i
    LEFT JOIN _call_defs cd ON cd.id = i.call_id
    LEFT JOIN gpu_ops gs ON gs.id = i.call_id AND cd.id IS NULL
    LEFT JOIN gpu g ON g.call_id = i.call_id
    LEFT JOIN cpu cp ON cp.call_id = i.call_id
    LEFT JOIN inner_ops io ON io.call_id = i.call_id
    LEFT JOIN cpu_slices so ON so.id = io.shape_op
    LEFT JOIN qk ON qk.call_id = i.call_id
    LEFT JOIN cpu_slices qo ON qo.id = qk.qk_op
    LEFT JOIN call_ops co ON co.call_id = i.call_id
    LEFT JOIN cpu_slices nm ON nm.id = co.native_op
),
shaped AS (
    SELECT call_id, trace_id, impl, op, call_source, gpu_ops, gpu_ns, attention_kernel_ns, cpu_ns, orphan, ts_ns,
           CASE WHEN backward THEN 'backward' WHEN call_source <> 'kernel' THEN 'forward' END AS direction,
           -- SDPA: query [B, H, Sq, D], key [B, Hkv, Skv, D]. A QK^T product: [B, H, Sq, D] x [B, H, D, Skv],
           -- or a 3-D bmm [B*H, Sq, D] x [B*H, D, Skv] that does not tell B and H apart.
           CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(q_dims->>'$[0]' AS BIGINT)
                WHEN nm_dims IS NOT NULL THEN TRY_CAST(nm_dims->>'$[0][0]' AS BIGINT)
                WHEN json_array_length(qk_dims->'$[0]') = 4 THEN TRY_CAST(qk_dims->>'$[0][0]' AS BIGINT)
           END AS batch,
           CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(q_dims->>'$[1]' AS BIGINT)
                WHEN nm_dims IS NOT NULL THEN nm_heads
                WHEN json_array_length(qk_dims->'$[0]') = 4 THEN TRY_CAST(qk_dims->>'$[0][1]' AS BIGINT)
                WHEN tk_dims IS NOT NULL THEN TRY_CAST(tk_dims->>'$[0][1]' AS BIGINT)
           END AS heads,
           CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(k_dims->>'$[1]' AS BIGINT)
                WHEN nm_dims IS NOT NULL THEN nm_heads
                WHEN json_array_length(qk_dims->'$[1]') = 4 THEN TRY_CAST(qk_dims->>'$[1][1]' AS BIGINT)
                WHEN tk_dims IS NOT NULL THEN TRY_CAST(tk_dims->>'$[1][1]' AS BIGINT)
           END AS kv_heads,
           CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(q_dims->>'$[2]' AS BIGINT)
                WHEN nm_dims IS NOT NULL THEN TRY_CAST(nm_dims->>'$[0][1]' AS BIGINT)
                ELSE TRY_CAST(qk_dims->>'$[0][#-2]' AS BIGINT) END AS seq_q,
           CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(k_dims->>'$[2]' AS BIGINT)
                WHEN nm_dims IS NOT NULL THEN TRY_CAST(nm_dims->>'$[1][1]' AS BIGINT)
                ELSE TRY_CAST(qk_dims->>'$[1][#-1]' AS BIGINT) END AS seq_kv,
           CASE WHEN input_dims IS NOT NULL THEN TRY_CAST(q_dims->>'$[3]' AS BIGINT)
                -- E / H, when H divides it
                WHEN nm_dims IS NOT NULL THEN CASE WHEN TRY_CAST(nm_dims->>'$[0][2]' AS BIGINT) % nm_heads = 0
                                                   THEN TRY_CAST(nm_dims->>'$[0][2]' AS BIGINT) // nm_heads END
                WHEN qk_dims IS NULL AND tk_dims IS NOT NULL THEN TRY_CAST(tk_dims->>'$[0][2]' AS BIGINT)
                ELSE TRY_CAST(qk_dims->>'$[0][#-1]' AS BIGINT) END AS head_dim,
           CASE WHEN input_dims IS NULL AND nm_dims IS NULL AND json_array_length(qk_dims->'$[0]') = 3
                THEN TRY_CAST(qk_dims->>'$[0][0]' AS BIGINT) END AS bh_3d,
           CASE lower(json_extract_string(concrete_inputs, '$[' || causal_arg || ']'))
               WHEN 'true' THEN true WHEN 'false' THEN false END AS causal,
           coalesce(json_extract_string(input_types, '$[0]'), json_extract_string(nm_types, '$[0]'),
                    json_extract_string(qk_types, '$[0]')) AS dtype
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
SELECT c.call_id, c.trace_id, CASE WHEN b.call_id IS NULL THEN c.impl ELSE f.impl END AS impl, c.op, c.call_source, c.gpu_ops, c.gpu_ns,
       c.attention_kernel_ns, c.cpu_ns, c.orphan, c.ts_ns,
       CASE WHEN b.call_id IS NULL THEN c.batch ELSE f.batch END AS batch,
       CASE WHEN b.call_id IS NULL THEN c.heads ELSE f.heads END AS heads,
       CASE WHEN b.call_id IS NULL THEN c.kv_heads ELSE f.kv_heads END AS kv_heads,
       CASE WHEN b.call_id IS NULL THEN c.seq_q ELSE f.seq_q END AS seq_q,
       CASE WHEN b.call_id IS NULL THEN c.seq_kv ELSE f.seq_kv END AS seq_kv,
       CASE WHEN b.call_id IS NULL THEN c.head_dim ELSE f.head_dim END AS head_dim,
       CASE WHEN b.call_id IS NULL THEN c.batch_heads ELSE f.batch_heads END AS batch_heads,
       CASE WHEN b.call_id IS NULL THEN c.causal ELSE f.causal END AS causal,
       CASE WHEN b.call_id IS NULL THEN c.dtype ELSE f.dtype END AS dtype,
       CASE WHEN b.call_id IS NULL THEN c.flops ELSE 2 * f.flops END AS flops,
       CASE WHEN b.call_id IS NULL THEN c.direction ELSE 'backward' END AS direction
FROM counted c
LEFT JOIN _bw_call b ON b.call_id = c.call_id AND b.new
LEFT JOIN counted f ON f.call_id = b.fwd_call_id;
