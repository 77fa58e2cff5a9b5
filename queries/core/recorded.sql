-- What each trace was recorded with: the evidence the attribution reads, present or not.
--
-- One row per trace: its CPU ops, GPU ops, Python frames (with_stack) and nn.Module scopes (with_modules),
-- and how many CPU ops carry Input Dims (record_shapes). A zero says what a query that needs it cannot see:
-- module_summary reads the module scopes, the attention calls' shapes and FLOPs read Input Dims, the CPU-side
-- evidence of attention (labels, ops, modules) needs CPU ops. The report says it in a sentence per trace.
--
-- @column trace VARCHAR          Trace label.
-- @column cpu_ops BIGINT         CPU ops (cpu_op slices).
-- @column ops_with_shapes BIGINT CPU ops with Input Dims (record_shapes=True).
-- @column gpu_ops BIGINT         GPU ops (kernels, memcpys, memsets), orphans included.
-- @column python_frames BIGINT   python_function events (with_stack=True).
-- @column module_scopes BIGINT   Of those, nn.Module scopes (with_modules=True).
-- @column labels BIGINT          record_function ranges (user_annotation), ProfilerStep#N aside.
WITH cpu AS (
    SELECT trace_id, count(*) FILTER (WHERE kind = 'cpu_op') AS cpu_ops,
           count(*) FILTER (WHERE kind = 'cpu_op' AND input_dims IS NOT NULL AND input_dims::VARCHAR <> '[]')
               AS ops_with_shapes,
           count(*) FILTER (WHERE kind = 'user_annotation' AND NOT starts_with(name, 'ProfilerStep#')) AS labels
    FROM cpu_slices GROUP BY trace_id
),
gpu AS (SELECT trace_id, count(*) AS gpu_ops FROM gpu_ops GROUP BY trace_id),
py AS (
    SELECT trace_id, count(*) AS python_frames, count(*) FILTER (WHERE starts_with(name, 'nn.Module: ')) AS module_scopes
    FROM python_functions GROUP BY trace_id
)
SELECT t.trace, coalesce(c.cpu_ops, 0) AS cpu_ops, coalesce(c.ops_with_shapes, 0) AS ops_with_shapes,
       coalesce(g.gpu_ops, 0) AS gpu_ops, coalesce(p.python_frames, 0) AS python_frames,
       coalesce(p.module_scopes, 0) AS module_scopes, coalesce(c.labels, 0) AS labels
FROM traces t
LEFT JOIN cpu c USING (trace_id)
LEFT JOIN gpu g USING (trace_id)
LEFT JOIN py p USING (trace_id)
ORDER BY t.trace_id;
