-- Attention calls that take longer on the CPU than on the GPU.
--
-- When an attention call's CPU duration (its range or op, dispatch and launch
-- included) exceeds the GPU time of the work it launches, back-to-back calls
-- keep the GPU waiting: the launch path, not the kernel, limits throughput
-- (the post's cuDNN backend moves CPU time into plan selection). Means over
-- the calls of a trace, per implementation and defining label or op, so one
-- cold first call does not decide; gpu_ns is op-level time. Only calls with a
-- CPU duration count (calls found by kernel name have none), orphans never.
--
-- @column trace VARCHAR            Trace label.
-- @column impl VARCHAR             Attention implementation.
-- @column op VARCHAR               Label or op that defines the calls.
-- @column calls BIGINT             Calls of this implementation and op.
-- @column cpu_ns_per_call DOUBLE   Mean CPU duration of a call, nanoseconds.
-- @column gpu_ns_per_call DOUBLE   Mean op-level GPU time of a call, nanoseconds.
-- @column cpu_gpu_ratio DOUBLE     cpu_ns_per_call / gpu_ns_per_call.
-- @column calls_cpu_bound BIGINT   Calls whose own CPU duration exceeds their GPU time.
SELECT t.trace, c.impl, c.op, count(*) AS calls, avg(c.cpu_ns) AS cpu_ns_per_call,
       avg(c.gpu_ns) AS gpu_ns_per_call, round(avg(c.cpu_ns) / avg(c.gpu_ns), 3) AS cpu_gpu_ratio,
       count(*) FILTER (WHERE c.cpu_ns > c.gpu_ns) AS calls_cpu_bound
FROM attention_calls c
JOIN traces t USING (trace_id)
WHERE NOT c.orphan AND c.cpu_ns IS NOT NULL AND c.gpu_ns > 0
GROUP BY t.trace, c.impl, c.op
HAVING avg(c.cpu_ns) > avg(c.gpu_ns)
ORDER BY t.trace, cpu_gpu_ratio DESC, c.impl, c.op;
