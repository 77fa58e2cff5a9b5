-- Attention calls that take longer on the CPU than on the GPU.
--
-- When an attention call's CPU duration (its range or op, dispatch and launch
-- included) exceeds the GPU time of the work it launches, back-to-back calls
-- keep the GPU waiting: the launch path, not the kernel, limits throughput
-- (the post's cuDNN backend moves CPU time into plan selection). One row per
-- trace, implementation and kind of call: the defining label or op, or for a
-- call defined by an nn.Module scope its module class (the instance's _n
-- suffix dropped, so the twelve layers of a model are one row, not twelve).
-- Figures are means and medians over the calls of that kind, so one cold first
-- call does not decide; the worst single call (highest CPU / GPU ratio) is
-- named as such. gpu_ns is op-level time. Only calls with a CPU duration
-- count (calls found by kernel name have none), orphans never.
--
-- @column trace VARCHAR            Trace label.
-- @column impl VARCHAR             Attention implementation.
-- @column op VARCHAR               Label, op or module class (nn.Module: Class) that defines the calls.
-- @column calls BIGINT             Calls of this implementation and kind.
-- @column cpu_ns_per_call DOUBLE   Mean CPU duration of a call, nanoseconds.
-- @column gpu_ns_per_call DOUBLE   Mean op-level GPU time of a call, nanoseconds.
-- @column cpu_gpu_ratio DOUBLE     cpu_ns_per_call / gpu_ns_per_call.
-- @column calls_cpu_bound BIGINT   Calls whose own CPU duration exceeds their GPU time.
-- @column cpu_ns_median DOUBLE     Median CPU duration of a call, nanoseconds.
-- @column gpu_ns_median DOUBLE     Median op-level GPU time of a call, nanoseconds.
-- @column worst_call VARCHAR       The call with the highest CPU / GPU ratio: its label, op or module instance.
-- @column worst_cpu_ns BIGINT      That call's CPU duration, nanoseconds.
-- @column worst_gpu_ns BIGINT      That call's op-level GPU time, nanoseconds.
WITH calls AS (
    SELECT trace_id, impl, op AS call_op, cpu_ns, gpu_ns,
           CASE WHEN starts_with(op, 'nn.Module: ') THEN regexp_replace(op, '_[0-9]+$', '') ELSE op END AS op
    FROM attention_calls
    WHERE NOT orphan AND cpu_ns IS NOT NULL AND gpu_ns > 0
)
SELECT t.trace, c.impl, c.op, count(*) AS calls, avg(c.cpu_ns) AS cpu_ns_per_call,
       avg(c.gpu_ns) AS gpu_ns_per_call, round(avg(c.cpu_ns) / avg(c.gpu_ns), 3) AS cpu_gpu_ratio,
       count(*) FILTER (WHERE c.cpu_ns > c.gpu_ns) AS calls_cpu_bound,
       median(c.cpu_ns)::DOUBLE AS cpu_ns_median, median(c.gpu_ns)::DOUBLE AS gpu_ns_median,
       arg_max(c.call_op, c.cpu_ns / c.gpu_ns) AS worst_call,
       arg_max(c.cpu_ns, c.cpu_ns / c.gpu_ns)::BIGINT AS worst_cpu_ns,
       arg_max(c.gpu_ns, c.cpu_ns / c.gpu_ns)::BIGINT AS worst_gpu_ns
FROM calls c
JOIN traces t USING (trace_id)
GROUP BY t.trace, c.impl, c.op
HAVING avg(c.cpu_ns) > avg(c.gpu_ns)
ORDER BY t.trace, cpu_gpu_ratio DESC, c.impl, c.op;
