-- Per attention call and stage: the GPU time each call spent in each stage (the gate's per-call samples).
--
-- One row per attention call that per-call figures divide by (the counts_as_call
-- macro: forward calls and calls with no direction) and attention stage of the
-- GPU ops launched inside it (gpu_op_stages.call_id); a call with no GPU op
-- (a CPU-only trace) has one row with stage NULL and gpu_ns 0. A training
-- step's backward calls are not rows: their time belongs to their forward
-- call, which this table does not link, so per-step figures (step_stages) are
-- the ones that include it. tracekit diff --gate reads these rows as the
-- samples of STAGE.per_call. By default orphan GPU ops are left out.
--
-- @param include_orphans BOOLEAN = false   Also count GPU ops launched before the trace began.
-- @column trace VARCHAR       Trace label.
-- @column call_id BIGINT      Attention call (attention_calls.call_id).
-- @column stage VARCHAR       Attention stage of the call's GPU ops (NULL: the call has none).
-- @column gpu_ops BIGINT      GPU ops of this stage in the call.
-- @column gpu_ns BIGINT       Their summed duration, nanoseconds.
WITH calls AS (
    SELECT trace_id, call_id, ts_ns FROM attention_calls
    WHERE counts_as_call(direction) AND ($include_orphans OR NOT orphan)
),
ops AS (
    SELECT call_id, stage, count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS gpu_ns
    FROM gpu_op_stages
    WHERE call_id IS NOT NULL AND ($include_orphans OR NOT orphan)
    GROUP BY call_id, stage
)
SELECT t.trace, c.call_id, o.stage, coalesce(o.gpu_ops, 0) AS gpu_ops, coalesce(o.gpu_ns, 0)::BIGINT AS gpu_ns
FROM calls c
LEFT JOIN ops o USING (call_id)
JOIN traces t ON t.trace_id = c.trace_id
ORDER BY t.trace, c.ts_ns, c.call_id, o.stage;
