-- Launch delay per stream: from the runtime call that launched a GPU op to its start on the GPU (HTA's launch stats).
--
-- One row per trace, device and stream over the GPU ops whose launch is in
-- the trace: launch delay = GPU start - launch call start (time queued
-- behind earlier work plus the launch itself). launch_bound_ops counts ops
-- whose launch call took longer on the CPU than the op on the GPU: back to
-- back, such ops leave the GPU waiting on the CPU (HTA's "launch-bound"
-- kernels; idle_breakdown's host wait measures the time it costs).
--
-- @column trace VARCHAR              Trace label.
-- @column device INTEGER             GPU index.
-- @column stream BIGINT              Stream.
-- @column gpu_ops BIGINT             GPU ops with their launch in the trace.
-- @column delay_ns_avg DOUBLE        Mean launch delay, nanoseconds.
-- @column delay_ns_p50 DOUBLE        Median launch delay, nanoseconds.
-- @column delay_ns_p90 DOUBLE        90th percentile, nanoseconds.
-- @column delay_ns_max BIGINT        Longest launch delay, nanoseconds.
-- @column launch_cpu_ns_avg DOUBLE   Mean CPU duration of the launch calls, nanoseconds.
-- @column gpu_ns_avg DOUBLE          Mean GPU duration of the ops, nanoseconds.
-- @column launch_bound_ops BIGINT    Ops whose launch call lasted longer than the op itself.
WITH ops AS (
    SELECT g.trace_id, g.device, g.stream, g.ts_ns - g.launch_ts_ns AS delay, r.dur_ns AS cpu_ns, g.dur_ns
    FROM gpu_ops g JOIN runtime_calls r ON r.id = g.launch_id
)
SELECT t.trace, o.device, o.stream, count(*) AS gpu_ops, avg(delay) AS delay_ns_avg,
       quantile_cont(delay, 0.5) AS delay_ns_p50, quantile_cont(delay, 0.9) AS delay_ns_p90,
       max(delay)::BIGINT AS delay_ns_max, avg(cpu_ns) AS launch_cpu_ns_avg, avg(dur_ns) AS gpu_ns_avg,
       count(*) FILTER (WHERE cpu_ns > dur_ns) AS launch_bound_ops
FROM ops o JOIN traces t USING (trace_id)
GROUP BY t.trace, o.device, o.stream
ORDER BY t.trace, o.device, o.stream;
