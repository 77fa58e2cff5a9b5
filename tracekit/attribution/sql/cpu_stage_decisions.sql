-- cpu_stage_decisions: the CPU slices a rule or call decided, with their stages resolved (columns: docs/schema.md).
--
-- Stages are resolved over the decided slices only (attribution/resolved_stage), then joined onto every
-- slice. A slice of an eager call that no rule decided, between the call's QK^T product and its softmax,
-- modifies the scores: mask, or position_bias when an embedding lookup there reads a bias table (T5); the
-- slices of a bias table read by the heads (attribution/bias_tables) are position_bias where an op decided. A
-- slice under a marked op or scope that decided nothing and has no call is other/none, and has no row.
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @param rope_ops LIST                    The stages a plain-op rotary embedding is made of (assign.ROPE_OPS).
-- @reads _slice_stages, _call_anchors, _cpu, _bias_slices
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
)
SELECT x.x AS id, c.trace_id,
       CASE WHEN pb.x IS NOT NULL THEN 'position_bias' ELSE coalesce(x.stage, b.stage) END AS stage,
       CASE WHEN b.x IS NOT NULL OR pb.x IS NOT NULL THEN 'op' ELSE x.source END AS source, x.call_id, x.decider_id,
       CASE WHEN pb.x IS NOT NULL THEN 'eager: a bias table read by the heads, its index and shape'
            WHEN b.x IS NOT NULL THEN 'eager: between the QK^T product and the softmax' ELSE x.rule END AS rule
FROM _slice_resolved x JOIN _cpu c ON c.id = x.x LEFT JOIN scores b ON b.x = x.x
LEFT JOIN _bias_slices pb ON pb.x = x.x
-- A slice under a marked op or scope that decided nothing and has no call is other/none.
WHERE x.stage IS NOT NULL OR x.source IS NOT NULL OR x.call_id IS NOT NULL OR x.decider_id IS NOT NULL
   OR x.rule IS NOT NULL;

DROP TABLE _slice_resolved;

DROP TABLE _bias_slices;

DROP TABLE _slice_calls;

DROP TABLE _slice_stages;

DROP TABLE _op_facts;
