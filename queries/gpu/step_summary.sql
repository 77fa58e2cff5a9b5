-- Per profiler step: CPU time, the GPU work it launched, and how it compares with the other steps.
--
-- One row per ProfilerStep#N range (the user_annotation prof.step() records).
-- A GPU op belongs to a step when the runtime call that launched it starts
-- inside the step's range, on any thread of the step's process: Kineto nests
-- annotations per thread, so kernels launched by the autograd engine's
-- backward thread are not inside ProfilerStep#N on the main thread, and
-- counting only launches under the step's name (step_thread_gpu_ops) misses
-- them (39 to 63 % of the GPU ops of the shared training traces).
-- GPU ops with no launch in the trace (orphans) belong to no step. kernel_ns
-- sums the durations of the step's GPU ops (kernels, memcpys, memsets);
-- busy_ns is the union of their intervals (overlapping streams count once);
-- span_ns runs from the first one's start to the last one's end, which can
-- lie after the step ends on the CPU. The kernel_ns_* statistics are taken
-- over all steps of the trace (stddev is the sample standard deviation, NULL
-- for a single step) and repeated on every row, so an unusual step stands
-- out: kernel_ns_vs_median_pct is how far this step's kernel_ns lies above
-- (+) or below (-) the median step's, in percent (the post's step whose
-- kernels took 1084 us against ~580 us typical reads about +87).
--
-- @column trace VARCHAR                    Trace label.
-- @column step BIGINT                      N of ProfilerStep#N (NULL if the name has no number).
-- @column step_name VARCHAR                The annotation's name, e.g. ProfilerStep#4.
-- @column cpu_ns BIGINT                    Duration of the step's range on the CPU, nanoseconds.
-- @column gpu_ops BIGINT                   GPU ops launched during the step by any thread of its process.
-- @column step_thread_gpu_ops BIGINT       Of those, launched on the step's own thread (inside the annotation).
-- @column kernel_ns BIGINT                 Summed duration of the step's GPU ops, nanoseconds.
-- @column busy_ns BIGINT                   Union of their intervals, nanoseconds.
-- @column span_ns BIGINT                   First GPU op start to last GPU op end, nanoseconds.
-- @column idle_ns BIGINT                   span_ns - busy_ns, nanoseconds.
-- @column busy_pct DOUBLE                  100 * busy_ns / span_ns.
-- @column kernel_ns_mean DOUBLE            Mean kernel_ns over the trace's steps, nanoseconds.
-- @column kernel_ns_median DOUBLE          Median kernel_ns over the trace's steps, nanoseconds.
-- @column kernel_ns_stddev DOUBLE          Sample standard deviation of kernel_ns over the steps, nanoseconds.
-- @column kernel_ns_cv_pct DOUBLE          100 * kernel_ns_stddev / kernel_ns_mean: step-to-step variation.
-- @column kernel_ns_vs_median_pct DOUBLE   100 * (kernel_ns - kernel_ns_median) / kernel_ns_median.
WITH steps AS (
    SELECT id, trace_id, pid, tid, step_name, ts_ns, end_ns, dur_ns, step FROM profiler_steps
),
step_ops AS (
    SELECT s.id AS step_id, g.ts_ns, g.end_ns, g.dur_ns, r.tid = s.tid AS same_thread
    FROM steps s
    JOIN runtime_calls r ON r.trace_id = s.trace_id AND r.pid = s.pid
                        AND r.ts_ns >= s.ts_ns AND r.ts_ns < s.end_ns
    JOIN gpu_ops g ON g.launch_id = r.id
),
intervals AS (
    SELECT step_id AS grp, ts_ns, end_ns FROM step_ops
),
busy AS (
    SELECT grp AS step_id, busy_ns FROM busy_union(intervals)
),
work AS (
    SELECT step_id, count(*) AS gpu_ops, count(*) FILTER (WHERE same_thread) AS step_thread_gpu_ops,
           sum(dur_ns) AS kernel_ns, min(ts_ns) AS first_ns, max(end_ns) AS last_ns
    FROM step_ops
    GROUP BY step_id
),
per_step AS (
    SELECT s.id, s.trace_id, s.step, s.step_name, s.ts_ns, s.dur_ns AS cpu_ns,
           coalesce(w.gpu_ops, 0) AS gpu_ops, coalesce(w.step_thread_gpu_ops, 0) AS step_thread_gpu_ops,
           coalesce(w.kernel_ns, 0)::BIGINT AS kernel_ns, coalesce(b.busy_ns, 0)::BIGINT AS busy_ns,
           coalesce(w.last_ns - w.first_ns, 0)::BIGINT AS span_ns
    FROM steps s
    LEFT JOIN work w ON w.step_id = s.id
    LEFT JOIN busy b ON b.step_id = s.id
),
stats AS (
    SELECT *,
           avg(kernel_ns) OVER trace_steps AS kernel_ns_mean,
           median(kernel_ns) OVER trace_steps AS kernel_ns_median,
           stddev_samp(kernel_ns) OVER trace_steps AS kernel_ns_stddev
    FROM per_step
    WINDOW trace_steps AS (PARTITION BY trace_id)
)
SELECT t.trace, s.step, s.step_name, s.cpu_ns, s.gpu_ops, s.step_thread_gpu_ops,
       s.kernel_ns, s.busy_ns, s.span_ns, (s.span_ns - s.busy_ns)::BIGINT AS idle_ns,
       CASE WHEN s.span_ns > 0 THEN round(100.0 * s.busy_ns / s.span_ns, 3) END AS busy_pct,
       round(s.kernel_ns_mean, 3) AS kernel_ns_mean,
       round(s.kernel_ns_median, 3) AS kernel_ns_median,
       round(s.kernel_ns_stddev, 3) AS kernel_ns_stddev,
       CASE WHEN s.kernel_ns_mean > 0 THEN round(100.0 * s.kernel_ns_stddev / s.kernel_ns_mean, 3) END
           AS kernel_ns_cv_pct,
       CASE WHEN s.kernel_ns_median > 0
            THEN round(100.0 * (s.kernel_ns - s.kernel_ns_median) / s.kernel_ns_median, 3) END
           AS kernel_ns_vs_median_pct
FROM stats s
JOIN traces t USING (trace_id)
ORDER BY t.trace, s.step NULLS LAST, s.ts_ns, s.id;
