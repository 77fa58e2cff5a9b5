-- cpu_stage_decisions: the CPU slices a rule or call decided, with their stages resolved (columns: docs/schema.md).
--
-- Stages are resolved over the decided slices only (attribution/resolved_stage), then joined onto every
-- slice. A slice under a marked op or scope that decided nothing and has no call is other/none, and has no
-- row.
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @param rope_ops LIST                    The stages a plain-op rotary embedding is made of (assign.ROPE_OPS).
-- @reads _slice_stages, _call_anchors, _cpu
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
SELECT x.x AS id, c.trace_id, x.stage, x.source, x.call_id, x.decider_id, x.rule
FROM _slice_resolved x JOIN _cpu c ON c.id = x.x
-- A slice under a marked op or scope that decided nothing and has no call is other/none.
WHERE x.stage IS NOT NULL OR x.source IS NOT NULL OR x.call_id IS NOT NULL OR x.decider_id IS NOT NULL
   OR x.rule IS NOT NULL;

DROP TABLE _slice_resolved;

DROP TABLE _slice_calls;

DROP TABLE _slice_stages;

DROP TABLE _op_facts;
