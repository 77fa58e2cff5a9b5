-- The GPU ops of every attention call on a time axis, with the call's profiler step.
--
-- One row per GPU op launched inside an attention call (gpu_op_stages.call_id),
-- for drawing a call as a timeline coloured by stage: start_ns is the op's
-- start minus the start of the call's first GPU op (the first op starts at 0;
-- a gap between ops is GPU time inside the call when the stream waited).
-- step is the profiler step the call starts in (step_of: the ProfilerStep#N
-- range of the call's process, any thread, so a call on the backward thread
-- has one; for calls found by kernel name: where the kernel's launch starts),
-- NULL outside every step;
-- call_in_step numbers the calls of a step (of the trace when there is no
-- step) by their start, from 1, so call_in_step = 1 picks one call per step.
-- By default calls made only of orphan GPU ops are left out.
--
-- @param include_orphans BOOLEAN = false   Also list calls whose GPU ops were all launched before the trace began.
-- @column trace VARCHAR            Trace label.
-- @column call_id BIGINT           Attention call (attention_calls.call_id).
-- @column impl VARCHAR             The call's implementation (naive, math, flash, ...).
-- @column step BIGINT              N of the ProfilerStep#N range the call starts in (NULL: none).
-- @column call_in_step BIGINT      Rank of the call within its step by start time, from 1.
-- @column gpu_op_id BIGINT         gpu_ops.id.
-- @column kind VARCHAR             kernel, memcpy or memset.
-- @column name VARCHAR             GPU op name as written.
-- @column stage VARCHAR            Attention stage of the GPU op.
-- @column device INTEGER           GPU index.
-- @column stream BIGINT            Stream.
-- @column start_ns BIGINT          Start relative to the call's first GPU op, nanoseconds.
-- @column dur_ns BIGINT            Duration, nanoseconds.
-- @column attention_kernel BOOLEAN Counted in kernel-level attention time.
WITH calls AS (
    SELECT c.trace_id, c.call_id, c.impl, c.ts_ns,
           step_of(c.trace_id, coalesce(cs.pid, r.pid), coalesce(cs.ts_ns, r.ts_ns)) AS step
    FROM attention_calls c
    LEFT JOIN cpu_slices cs ON cs.id = c.call_id
    LEFT JOIN gpu_ops g ON g.id = c.call_id AND cs.id IS NULL
    LEFT JOIN runtime_calls r ON r.id = g.launch_id
    WHERE $include_orphans OR NOT c.orphan
),
ranked AS (
    SELECT *, row_number() OVER (PARTITION BY trace_id, step ORDER BY ts_ns, call_id) AS call_in_step
    FROM calls
),
ops AS (
    SELECT s.call_id, g.id, g.kind, g.name, s.stage, g.device, g.stream, g.ts_ns, g.dur_ns, s.attention_kernel,
           min(g.ts_ns) OVER (PARTITION BY s.call_id) AS call_gpu_start
    FROM gpu_op_stages s
    JOIN gpu_ops g USING (id)
    WHERE s.call_id IS NOT NULL
)
SELECT t.trace, r.call_id, r.impl, r.step, r.call_in_step, o.id AS gpu_op_id, o.kind, o.name, o.stage,
       o.device, o.stream, (o.ts_ns - o.call_gpu_start)::BIGINT AS start_ns, o.dur_ns, o.attention_kernel
FROM ranked r
JOIN ops o USING (call_id)
JOIN traces t ON t.trace_id = r.trace_id
ORDER BY t.trace, r.ts_ns, r.call_id, o.ts_ns, o.id;
