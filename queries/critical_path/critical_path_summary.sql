-- The critical path by kind of edge: how much of it is CPU, launch delay, GPU op, gap or synchronization.
--
-- critical_path summed by kind, one row per trace and kind on the path:
-- time_ns is the kind's time on the path and pct its share of the path's
-- length (HTA's critical-path summary by bound_by: cpu is cpu_bound, kernel
-- gpu_compute_bound, communication gpu_communication_bound, kernel_gap
-- gpu_kernel_kernel_overhead, launch_delay gpu_kernel_launch_overhead; cpu_gap
-- is host time between top-level calls, which HTA does not count). A last row
-- of kind total holds the trace's part of the path (pct 100; with cross_rank,
-- the rank's share of its job's path, every pct too); critical_path_whatif
-- puts the length next to the region's span, critical_path_stages splits it
-- by attention stage.
--
-- @param cross_rank BOOLEAN = false   Join the ranks of a job into one path through their collectives.
--
-- @uses critical_path
-- @column trace VARCHAR     Trace label.
-- @column rank INTEGER      The trace's rank (traces.rank; NULL when none was recorded).
-- @column region VARCHAR    The region instance's range name.
-- @column instance BIGINT   The instance, from 0.
-- @column kind VARCHAR      cpu, cpu_gap, launch_delay, kernel, communication, kernel_gap, sync, collective, or total.
-- @column time_ns BIGINT    Time of this kind on the path, ns (total: the trace's part of the path).
-- @column pct DOUBLE        100 * time_ns / the path's length (with cross_rank: the job's path).
WITH by_kind AS (
    SELECT trace, rank, region, instance, kind, sum(time_ns)::BIGINT AS time_ns
    FROM critical_path
    GROUP BY ALL
),
totals AS (  -- with cross_rank, the job's path: every trace of the database (one job) together
    SELECT trace, sum(time_ns) OVER (PARTITION BY CASE WHEN $cross_rank THEN '' ELSE trace END)::BIGINT AS path_ns
    FROM (SELECT trace, sum(time_ns) AS time_ns FROM by_kind GROUP BY trace)
)
SELECT b.trace, b.rank, b.region, b.instance, b.kind, b.time_ns,
       CASE WHEN t.path_ns > 0 THEN round(100.0 * b.time_ns / t.path_ns, 3) END AS pct
FROM by_kind b JOIN totals t USING (trace)
UNION ALL
SELECT b.trace, any_value(b.rank), any_value(b.region), any_value(b.instance), 'total', sum(b.time_ns)::BIGINT,
       CASE WHEN any_value(t.path_ns) > 0 THEN round(100.0 * sum(b.time_ns) / any_value(t.path_ns), 3) END
FROM by_kind b JOIN totals t USING (trace)
GROUP BY b.trace
ORDER BY trace, kind = 'total', time_ns DESC, kind
