-- Per profiler step and stage: the GPU time each step spent in each stage (the gate's per-step samples).
--
-- One row per ProfilerStep#N range and attention stage of the GPU ops launched
-- during it, by any thread of its process (as step_summary counts them, so a
-- training step's backward is in); a step that launched no GPU op has one row
-- with stage NULL. step_gpu_ns is the step's GPU op time in all stages
-- (step_summary.kernel_ns), so gpu_ns / step_gpu_ns is the stage's share of the
-- step; step_ns is the step's duration on the CPU (step_summary.cpu_ns).
-- tracekit diff --gate reads these rows as the samples of STAGE.per_step and
-- STAGE.share. GPU ops with no launch in the trace belong to no step.
--
-- @column trace VARCHAR        Trace label.
-- @column step BIGINT          N of ProfilerStep#N (NULL if the name has no number).
-- @column step_name VARCHAR    The annotation's name, e.g. ProfilerStep#4.
-- @column step_ns BIGINT       Duration of the step's range on the CPU, nanoseconds.
-- @column stage VARCHAR        Attention stage (NULL: the step launched no GPU op).
-- @column gpu_ops BIGINT       GPU ops of this stage launched during the step.
-- @column gpu_ns BIGINT        Their summed duration, nanoseconds.
-- @column step_gpu_ns BIGINT   GPU op time of the step, every stage, nanoseconds.
WITH steps AS MATERIALIZED (  -- (DuckDB 2.0.1 fails this range join on the bare view: "Unimplemented join type for merge join")
    SELECT id, trace_id, pid, ts_ns, end_ns FROM profiler_steps
),
step_ops AS (
    SELECT s.id AS step_id, g.id AS gpu_op_id, g.dur_ns
    FROM steps s
    JOIN runtime_calls r ON r.trace_id = s.trace_id AND r.pid = s.pid
                        AND r.ts_ns >= s.ts_ns AND r.ts_ns < s.end_ns
    JOIN gpu_ops g ON g.launch_id = r.id
),
per_stage AS (
    SELECT o.step_id, st.stage, count(*) AS gpu_ops, sum(o.dur_ns)::BIGINT AS gpu_ns
    FROM step_ops o
    JOIN gpu_op_stages st ON st.id = o.gpu_op_id
    GROUP BY o.step_id, st.stage
)
SELECT t.trace, p.step, p.step_name, p.dur_ns AS step_ns, s.stage, coalesce(s.gpu_ops, 0) AS gpu_ops,
       coalesce(s.gpu_ns, 0)::BIGINT AS gpu_ns,
       coalesce(sum(s.gpu_ns) OVER (PARTITION BY p.id), 0)::BIGINT AS step_gpu_ns
FROM profiler_steps p
LEFT JOIN per_stage s ON s.step_id = p.id
JOIN traces t ON t.trace_id = p.trace_id
ORDER BY t.trace, p.step NULLS LAST, p.ts_ns, p.id, s.stage;
