-- The slices of each position bias read by the heads (attribution/bias_tables): the read, the ops on tensors
-- below 3-D right before it (the bucket arithmetic over the [Sq, Skv] positions) and the reshapes right after
-- it (its [Sq, Skv, H] made [1, H, Sq, Skv]), siblings on its thread, with everything under them that an op
-- decided (not a label or module). cpu_stage_decisions makes them position_bias.
--
-- @param reshape_names TEXT   A reshape op's name (eager.RESHAPE_NAMES).
-- @reads _bias_tables, _slice_stages, cpu_slices, _cpu
-- @creates _bias_slices       The slices (x) of the position biases.
CREATE OR REPLACE TEMP TABLE _bias_slices AS
WITH sib AS ({{include attribution/siblings parents=_bias_tables}}),
runs AS (
    SELECT t.call_id, t.id, any_value(l.i) AS l_i,
           max(b.i) FILTER (WHERE b.i < l.i AND regexp_matches(b.input_dims::VARCHAR, '\[-?\d+,-?\d+,-?\d+'))
               AS before_i,
           min(b.i) FILTER (WHERE b.i > l.i AND NOT regexp_matches(b.name, {{reshape_names}})) AS after_i
    FROM _bias_tables t JOIN sib l ON l.id = t.id
    JOIN sib b ON b.lane = l.lane AND coalesce(b.parent_id, -1) = coalesce(l.parent_id, -1)
    GROUP BY t.call_id, t.id
),
spans AS (
    SELECT r.call_id, min(b.k0) AS k0, max(b.k1) AS k1
    FROM runs r JOIN sib l ON l.id = r.id
    JOIN sib b ON b.lane = l.lane AND coalesce(b.parent_id, -1) = coalesce(l.parent_id, -1)
     AND b.i > coalesce(r.before_i, 0) AND b.i < coalesce(r.after_i, r.l_i + 1)
    GROUP BY r.call_id, r.id
)
SELECT DISTINCT x.x
FROM spans p JOIN _slice_stages x ON x.call_id = p.call_id JOIN _cpu c ON c.id = x.x
WHERE c.k0 - p.k0 >= 0 AND p.k1 - c.k1 >= 0 AND coalesce(x.source, 'op') = 'op';

DROP TABLE _bias_tables;
