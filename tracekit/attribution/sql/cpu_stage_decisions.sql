-- cpu_stage_decisions: the CPU slices a rule or call decided, with their stages resolved (columns: docs/schema.md).
--
-- Stages are resolved over the decided slices only (attribution/resolved_stage), then joined onto every
-- slice. A slice of an eager call that no rule decided, between the call's QK^T product and its softmax,
-- modifies the scores: mask, or position_bias when an embedding lookup there reads a bias table (T5); a bias
-- table read by the heads before the softmax and the ops that make its index and shape it are position_bias. A
-- slice under a marked op or scope that decided nothing and has no call is other/none, and has no row.
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @param rope_ops LIST                    The stages a plain-op rotary embedding is made of (assign.ROPE_OPS).
-- @param reshape_names TEXT               A reshape op's name (eager.RESHAPE_NAMES).
-- @reads _slice_stages, _call_anchors, _cpu, cpu_slices
-- @scratch _slice_resolved                Per slice under a mark: x, stage (resolved), source, call_id, decider_id, rule.
-- @creates cpu_stage_decisions
CREATE OR REPLACE TEMP TABLE _slice_resolved AS
SELECT x.x,
       {{include attribution/resolved_stage stage=x.d.stage pos=x.d.pos anchor=a positional=x.positional nested=x.in_call_op low_rank=x.d.low_rank appends=x.d.appends rope_ops=rope_ops}}
           AS stage,
       x.source, x.call_id, x.d.decider AS decider_id, x.d.rule
FROM (SELECT *, source IN ('op', 'module') AS positional FROM _slice_stages) x
LEFT JOIN _call_anchors a ON a.call_id = x.call_id;

CREATE {{table}} cpu_stage_decisions AS
-- Per call, the span between its QK^T product (the last op of it before the softmax) and its softmax.
WITH span AS (
    SELECT x.call_id, max(c.pos) AS lo, any_value(a.softmax_pos) AS hi
    FROM _slice_resolved x JOIN _cpu c ON c.id = x.x JOIN _call_anchors a ON a.call_id = x.call_id
    WHERE x.stage = 'qk_matmul' AND c.pos < a.softmax_pos GROUP BY x.call_id
),
-- The call's ops in that span that no rule decided: they modify the scores. A bias table read there
-- (T5's relative position buckets end in an embedding lookup) makes them the position bias's.
between AS (
    SELECT x.x, x.stage IS NULL AS undecided,
           bool_or(c.name = 'aten::embedding') OVER (PARTITION BY x.call_id) AS lookup
    FROM _slice_resolved x JOIN _cpu c ON c.id = x.x JOIN span p ON p.call_id = x.call_id
    -- Differences, not two comparisons: an equality join with two range conditions became a merge join that
    -- DuckDB 2.0 cannot run ("Unimplemented join type for merge join").
    WHERE c.pos - p.lo > 0 AND p.hi - c.pos > 0
),
scores AS (
    SELECT x, CASE WHEN lookup THEN 'position_bias' ELSE 'mask' END AS stage FROM between WHERE undecided
),
-- Before the softmax (or a fused op): a bias table read ([P, H], H the heads of the call's 4-D QK^T operand or
-- fused op's query, by aten::index, index_select or embedding: Swin's relative_position_bias_table[index],
-- Hugging Face T5's relative_attention_bias), with the ops on tensors below 3-D right before it (the bucket
-- arithmetic over the [Sq, Skv] positions) and the reshapes right after it (its [Sq, Skv, H] made
-- [1, H, Sq, Skv]), siblings on its thread: the position bias, where no label or module decided (a table
-- by the rotary dim D is rope's, not this).
heads AS (
    SELECT x.call_id, arg_min(TRY_CAST(json_extract_string(s.input_dims, '$[0][1]') AS BIGINT), c.pos) AS h,
           any_value(coalesce(a.softmax_pos, a.product_pos, a.core_pos)) AS before_pos
    FROM _slice_resolved x JOIN cpu_slices s ON s.id = x.x JOIN _cpu c ON c.id = x.x
    JOIN _call_anchors a ON a.call_id = x.call_id
    WHERE x.stage IN ('qk_matmul', 'fused_attention') AND x.x = x.decider_id
      AND json_array_length(s.input_dims->'$[0]') = 4
    GROUP BY x.call_id
),
tables AS MATERIALIZED (
    SELECT x.call_id, x.x AS id, c.lane, s.parent_id
    FROM _slice_resolved x JOIN heads h USING (call_id) JOIN cpu_slices s ON s.id = x.x JOIN _cpu c ON c.id = x.x
    WHERE s.name IN ('aten::index', 'aten::index_select', 'aten::embedding') AND c.pos < h.before_pos
      AND json_array_length(s.input_dims->'$[0]') = 2
      AND TRY_CAST(json_extract_string(s.input_dims, '$[0][1]') AS BIGINT) = h.h
),
sib AS ({{include attribution/siblings parents=tables}}),
runs AS (
    SELECT t.call_id, t.id,
           max(b.i) FILTER (WHERE b.i < l.i AND regexp_matches(b.input_dims::VARCHAR, '\[-?\d+,-?\d+,-?\d+'))
               AS before_i,
           min(b.i) FILTER (WHERE b.i > l.i AND NOT regexp_matches(b.name, {{reshape_names}})) AS after_i,
           any_value(l.i) AS l_i
    FROM tables t JOIN sib l ON l.id = t.id
    JOIN sib b ON b.lane = l.lane AND coalesce(b.parent_id, -1) = coalesce(l.parent_id, -1)
    GROUP BY t.call_id, t.id
),
spans AS (
    SELECT r.call_id, min(b.k0) AS k0, max(b.k1) AS k1
    FROM runs r JOIN sib l ON l.id = r.id
    JOIN sib b ON b.lane = l.lane AND coalesce(b.parent_id, -1) = coalesce(l.parent_id, -1)
     AND b.i > coalesce(r.before_i, 0) AND b.i < coalesce(r.after_i, r.l_i + 1)
    GROUP BY r.call_id, r.id
),
bias AS (
    SELECT DISTINCT x.x
    FROM spans p JOIN _slice_resolved x ON x.call_id = p.call_id JOIN _cpu c ON c.id = x.x
    WHERE c.k0 - p.k0 >= 0 AND p.k1 - c.k1 >= 0 AND coalesce(x.source, 'op') = 'op'
)
SELECT x.x AS id, c.trace_id, CASE WHEN pb.x IS NOT NULL THEN 'position_bias' ELSE coalesce(x.stage, b.stage) END AS stage,
       CASE WHEN b.x IS NOT NULL OR pb.x IS NOT NULL THEN 'op' ELSE x.source END AS source, x.call_id, x.decider_id,
       CASE WHEN pb.x IS NOT NULL THEN 'eager: a bias table read by the heads, its index and shape'
            WHEN b.x IS NOT NULL THEN 'eager: between the QK^T product and the softmax' ELSE x.rule END AS rule
FROM _slice_resolved x JOIN _cpu c ON c.id = x.x LEFT JOIN scores b ON b.x = x.x LEFT JOIN bias pb ON pb.x = x.x
-- A slice under a marked op or scope that decided nothing and has no call is other/none.
WHERE x.stage IS NOT NULL OR x.source IS NOT NULL OR x.call_id IS NOT NULL OR x.decider_id IS NOT NULL
   OR x.rule IS NOT NULL;

DROP TABLE _slice_resolved;

DROP TABLE _slice_calls;

DROP TABLE _slice_stages;

DROP TABLE _op_facts;
