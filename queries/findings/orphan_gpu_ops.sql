-- GPU ops whose launch is not in the trace (orphans).
--
-- Kineto records GPU activity from the moment profiling starts, so kernels
-- queued in the step before (their launch happened before the window opened)
-- appear without a launch, CPU op or annotation: the post's traces each begin
-- with the warm-up step's last kernel. Their stage can only come from Kineto's
-- GPU annotations or the kernel name. Queries leave them out unless
-- include_orphans=true; they are listed here so nothing is silently dropped.
--
-- @column trace VARCHAR      Trace label.
-- @column gpu_op_id BIGINT   gpu_ops.id.
-- @column kind VARCHAR       kernel, memcpy or memset.
-- @column name VARCHAR       GPU op name as written.
-- @column stage VARCHAR      Attention stage (from a GPU annotation or the kernel name, else other).
-- @column source VARCHAR     What decided the stage: gpu_annotation, kernel, sequence (place in the kernel order around an attention kernel) or none.
-- @column ts_ns BIGINT       Start on the GPU, nanoseconds.
-- @column dur_ns BIGINT      Duration, nanoseconds.
SELECT t.trace, g.id AS gpu_op_id, g.kind, g.name, s.stage, s.source, g.ts_ns, g.dur_ns
FROM gpu_ops g
JOIN gpu_op_stages s USING (id)
JOIN traces t ON t.trace_id = g.trace_id
WHERE g.orphan
ORDER BY t.trace, g.ts_ns, g.id;
