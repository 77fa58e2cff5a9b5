-- The label of each GPU op without a launch, from Kineto's gpu_user_annotation ranges.
--
-- For GPU ops without a launch (orphans, no-correlation ops), Kineto's projection of the annotations onto
-- the GPU stream is the only label they can have: the innermost (latest-starting) range with a stage that
-- contains the op, on its pid. Containment is a filter over the equality join, written as differences so
-- DuckDB does not plan a range join: on some inputs (six post variants in one file) DuckDB picks a merge join
-- it cannot run ("Unimplemented join type for merge join"). Annotations per pid are few.
--
-- @reads gpu_ops, events, _label_match
-- @creates _gpu_label    Per GPU op without a launch inside a labelled range: id, d (stage, rule).
CREATE OR REPLACE TEMP TABLE _gpu_label AS
SELECT g.id,
       arg_max(struct_pack(stage := m.m.stage, rule := m.m.rule), a.ts_ns)
           FILTER (WHERE m.m.stage IS NOT NULL) AS d
FROM gpu_ops g
-- (differences, not comparisons: no range join)
JOIN events a ON a.kind = 'gpu_user_annotation' AND a.trace_id = g.trace_id AND a.pid = g.pid
             AND g.ts_ns - a.ts_ns >= 0 AND a.end_ns - g.end_ns >= 0
JOIN _label_match m ON m.name = a.name
WHERE g.launch_id IS NULL
GROUP BY g.id;
