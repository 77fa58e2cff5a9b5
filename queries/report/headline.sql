-- The report's headline numbers, one row per trace: what `tracekit report` shows at the top.
--
-- Built on the queries it summarizes (attention_calls, kernel_precision,
-- launch_api, occupancy, gpu_timeline), so each number means what that query
-- says. Per-call numbers are means over the trace's attention calls (calls
-- without the value left out), over the calls call_counts counts (the
-- counts_as_call macro: forward calls; backward ones are counted apart by backward_*); impl is the most frequent implementation (ties:
-- alphabetical); tensor_core_pct is kernel_precision's tensor-core share (0 when
-- the trace has kernels but none on tensor cores, NULL without kernels);
-- launch_api is the API whose GPU ops take the most GPU time; occupancies are
-- means weighted by kernel time; idle_pct is gpu_timeline's idle share of the
-- span. Orphans are left out throughout, as in the queries it uses.
--
-- @uses attention_calls
-- @uses kernel_precision
-- @uses launch_api
-- @uses occupancy
-- @uses gpu_timeline
-- @column trace VARCHAR                        Trace label.
-- @column device VARCHAR                       Name of the trace's first GPU (deviceProperties), NULL when none.
-- @column impl VARCHAR                         Most frequent attention implementation (NULL: no calls).
-- @column attention_calls BIGINT               Attention calls, backward ones aside.
-- @column gpu_ns_per_call DOUBLE               Mean op-level GPU time per call, nanoseconds.
-- @column attention_kernel_ns_per_call DOUBLE  Mean kernel-level GPU time per call, nanoseconds.
-- @column cpu_ns_per_call DOUBLE               Mean CPU time per call, nanoseconds.
-- @column gpu_ops_per_call DOUBLE              Mean GPU ops per call.
-- @column tflops_per_s DOUBLE                  Mean achieved TFLOP/s over calls with known shapes.
-- @column tensor_core_pct DOUBLE               Share of kernel time on tensor cores, percent.
-- @column launch_api VARCHAR                   Launch API with the most GPU time.
-- @column launch_apis VARCHAR[]                Every launch API, by GPU time (most first; ties by name).
-- @column reported_occupancy_pct DOUBLE        Kineto's reported occupancy, weighted by kernel time, percent.
-- @column theoretical_occupancy_pct DOUBLE     Theoretical occupancy (occupancy query), weighted by kernel time, percent.
-- @column idle_pct DOUBLE                      GPU idle share of the span of GPU ops, percent.
-- @column backward_calls BIGINT                Backward attention calls (a fused SDPA backward: direction = 'backward').
-- @column backward_gpu_ns_per_call DOUBLE      Mean op-level GPU time per backward call, nanoseconds.
WITH impls AS (
    SELECT trace, impl, count(*) AS n FROM attention_calls GROUP BY trace, impl
),
calls AS (
    SELECT trace, count(*) AS attention_calls, avg(gpu_ns) AS gpu_ns_per_call,
           avg(attention_kernel_ns) AS attention_kernel_ns_per_call, avg(cpu_ns) AS cpu_ns_per_call,
           avg(gpu_ops) AS gpu_ops_per_call, avg(tflops_per_s) AS tflops_per_s
    FROM attention_calls WHERE counts_as_call(direction) GROUP BY trace
),
backward AS (
    SELECT trace, count(*) AS backward_calls, avg(gpu_ns) AS backward_gpu_ns_per_call
    FROM attention_calls WHERE NOT counts_as_call(direction) GROUP BY trace
),
precision AS (
    SELECT trace, coalesce(max(share_pct) FILTER (WHERE precision = 'tensor_core'), 0.0) AS tensor_core_pct
    FROM kernel_precision GROUP BY trace
),
apis AS (
    SELECT trace, list(api ORDER BY coalesce(gpu_ns, 0) DESC, api) AS launch_apis FROM launch_api GROUP BY trace
),
occ AS (
    SELECT trace,
           sum(reported_occupancy_pct * total_ns) FILTER (WHERE reported_occupancy_pct IS NOT NULL AND total_ns <> 0)
               / sum(total_ns) FILTER (WHERE reported_occupancy_pct IS NOT NULL AND total_ns <> 0)
               AS reported_occupancy_pct,
           sum(theoretical_occupancy_pct * total_ns)
               FILTER (WHERE theoretical_occupancy_pct IS NOT NULL AND total_ns <> 0)
               / sum(total_ns) FILTER (WHERE theoretical_occupancy_pct IS NOT NULL AND total_ns <> 0)
               AS theoretical_occupancy_pct
    FROM occupancy GROUP BY trace
),
first_device AS (
    SELECT trace_id, arg_min(name, device) AS device FROM devices GROUP BY trace_id
)
SELECT t.trace, d.device,
       (SELECT i.impl FROM impls i WHERE i.trace = t.trace ORDER BY i.n DESC, i.impl LIMIT 1) AS impl,
       coalesce(c.attention_calls, 0) AS attention_calls, c.gpu_ns_per_call, c.attention_kernel_ns_per_call,
       c.cpu_ns_per_call, c.gpu_ops_per_call, c.tflops_per_s, p.tensor_core_pct,
       a.launch_apis[1] AS launch_api, coalesce(a.launch_apis, []) AS launch_apis,
       o.reported_occupancy_pct, o.theoretical_occupancy_pct,
       CASE WHEN g.span_ns > 0 THEN 100.0 * g.idle_ns / g.span_ns END AS idle_pct,
       coalesce(b.backward_calls, 0) AS backward_calls, b.backward_gpu_ns_per_call
FROM traces t
LEFT JOIN first_device d ON d.trace_id = t.trace_id
LEFT JOIN calls c ON c.trace = t.trace
LEFT JOIN backward b ON b.trace = t.trace
LEFT JOIN precision p ON p.trace = t.trace
LEFT JOIN apis a ON a.trace = t.trace
LEFT JOIN occ o ON o.trace = t.trace
LEFT JOIN gpu_timeline g ON g.trace = t.trace
ORDER BY t.trace;
