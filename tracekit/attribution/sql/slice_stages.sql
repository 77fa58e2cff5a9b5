-- Each CPU slice's deciding mark and its source, by the layers in order: label, (a collective op), module, op.
--
-- Per slice and layer, the deciding mark's row of _marked (its rowid), looked up once the layer is chosen
-- (an arg_max of the decision itself, a struct with strings, copies them into the aggregate states row by
-- row, which was most of this step's time). The innermost label with a stage decides; else the outermost
-- op a rule names a collective (comm_stage: a projection's module scope holds vLLM's all_reduce after its
-- o_proj, but communication is never the projection); else the innermost module scope; else the innermost op
-- of scope inner, else the outermost other op; a module's or op's mark counts when its context is any or the
-- slice is at or after its call's start. x @ W.T (Falcon's linear) is a projection, not one of the core's
-- products.
--
-- @param comm_stage TEXT    The stage of tensor-parallel communication (eager.TP_COMM).
-- @reads _slice_marks, _marked, _slice_calls, _op_facts
-- @scratch _slice_deciders  Per slice: call_id, in_call_op, and the deciding mark's rowid per layer (by_label, by_comm: a collective op over it, by_module, by_inner_op, by_outer_op).
-- @creates _slice_stages    Per slice under a mark: x, call_id, in_call_op, d (the decision: stage, decider, pos, rule, appends, low_rank), source (label, module, op).
CREATE OR REPLACE TEMP TABLE _slice_deciders AS
SELECT x.x, c.call_id, c.in_call_op,
       arg_max(m.rowid, m.pos)
           FILTER (WHERE m.kind = 'user_annotation' AND m.stage IS NOT NULL) AS by_label,
       -- The outermost collective op over it, which outranks every module scope, else the innermost module: two
       -- aggregates on the position itself (one shared key, offset so that ops outrank modules, once lost the
       -- positions in a DOUBLE and let two nested collectives tie).
       arg_min(m.rowid, m.pos)
           FILTER (WHERE m.kind = 'cpu_op' AND m.stage = {{comm_stage}} AND (m.context = 'any' OR m.pos >= c.call_pos))
           AS by_comm,
       arg_max(m.rowid, m.pos)
           FILTER (WHERE m.kind = 'module' AND m.stage IS NOT NULL AND (m.context = 'any' OR m.pos >= c.call_pos))
           AS by_module,
       arg_max(m.rowid, m.pos)
           FILTER (WHERE m.kind = 'cpu_op' AND m.stage IS NOT NULL AND m.scope = 'inner'
                   AND (m.context = 'any' OR m.pos >= c.call_pos)) AS by_inner_op,
       arg_min(m.rowid, m.pos)
           FILTER (WHERE m.kind = 'cpu_op' AND m.stage IS NOT NULL AND m.scope <> 'inner'
                   AND (m.context = 'any' OR m.pos >= c.call_pos)) AS by_outer_op
FROM _slice_marks x JOIN _marked m ON m.mkey = x.mkey LEFT JOIN _slice_calls c ON c.x = x.x
-- A mark of context call decides only slices in a call (the filters above): the pairs of the others, most of a
-- trace's when it holds few calls, are not aggregated (a slice none of whose pairs is left decides nothing).
WHERE m.context = 'any' OR m.kind = 'user_annotation' OR c.call_pos IS NOT NULL
GROUP BY x.x, c.call_id, c.in_call_op;

CREATE OR REPLACE TEMP TABLE _slice_stages AS
SELECT x.x, x.call_id, x.in_call_op,
       CASE WHEN m.rowid IS NOT NULL
            -- x @ W.T (Falcon's linear) is a projection, not one of the core's products.
            THEN struct_pack(stage := CASE WHEN m.stage = 'matmul' AND f.weight_product THEN 'proj'
                                           ELSE m.stage END,
                             decider := m.id, pos := m.pos, rule := m.rule,
                             appends := f.appends, low_rank := f.low_rank) END AS d,
       CASE WHEN by_label IS NOT NULL THEN 'label'
            WHEN by_comm IS NOT NULL THEN 'op'
            WHEN by_module IS NOT NULL THEN 'module'
            WHEN coalesce(by_inner_op, by_outer_op) IS NOT NULL THEN 'op' END AS source
FROM _slice_deciders x
LEFT JOIN _marked m ON m.rowid = coalesce(x.by_label, x.by_comm, x.by_module, x.by_inner_op, x.by_outer_op)
LEFT JOIN _op_facts f ON f.id = m.id;

DROP TABLE _slice_deciders;
