-- The eager layer's marks joined to the others, and each CPU slice's attention call.
--
-- A slice's call is its earliest call mark's (the outermost); in_call_op says it is inside (or is) an op
-- that marks a call itself (SDPA's math backend, a fused op).
--
-- @reads _eager_marks, _eager_pairs
-- @creates _marked        Rows added: the eager calls and widened call ops.
-- @creates _slice_marks   Rows added: the slices inside them.
-- @creates _slice_calls   Per CPU slice in a call: x, call_id, call_pos, in_call_op.
INSERT INTO _marked
SELECT id, mkey, kind, pos, stage, is_call, impl, context, scope, causal_arg, rule FROM _eager_marks;

INSERT INTO _slice_marks SELECT x, mkey FROM _eager_pairs;

CREATE OR REPLACE TEMP TABLE _slice_calls AS
SELECT x.x, arg_min(m.id, m.pos) AS call_id, min(m.pos) AS call_pos,
       -- Inside (or itself) an op that marks a call: SDPA's math backend, a fused op.
       bool_or(m.kind = 'cpu_op') AS in_call_op
FROM _slice_marks x JOIN _marked m ON m.mkey = x.mkey WHERE m.is_call GROUP BY x.x;
