-- GPU time as computation, communication, memcpy and idle, per trace: TraceLens's GPU timeline.
--
-- Each GPU op falls in one bucket (the gpu_op_category macro): memcpy (a
-- memcpy, or a ROCm __amd_rocclr_copy* blit kernel), communication (a kernel
-- or memset named *nccl*/*rccl*, any case, or *cross_device_reduce*), else
-- computation (every other kernel and every memset). Each bucket's time is
-- the union of its intervals over all streams and devices of the trace
-- (overlaps counted once). exposed_communication is the communication time
-- not overlapped by computation; exposed_memcpy the memcpy time overlapped by
-- neither; busy is the union of all GPU ops; total the span from the first
-- counted GPU op's start to the last one's end; idle = total - busy. So
-- computation + exposed_communication + exposed_memcpy + idle = total, and
-- pct is of total. Exact integer nanoseconds: TraceLens sums float
-- microseconds and differs by float noise (under 10 ns). By default GPU ops
-- launched before the trace began (orphans) are left out, as TraceLens's
-- timeline does; ops with no correlation id at all count (TraceLens reads only
-- the kernel/gpu_memcpy/gpu_memset categories, so it drops MTIA's). A CUPTI
-- range-profiler trace has no GPU op events (all zero here): range_counters
-- reads its per-kernel counters.
--
-- @param include_orphans BOOLEAN = false   Also count GPU ops launched before the trace began.
-- @column trace VARCHAR     Trace label.
-- @column category VARCHAR  computation, communication, memcpy, exposed_communication, exposed_memcpy, busy, idle or total.
-- @column time_ns BIGINT    Time in the category, nanoseconds.
-- @column pct DOUBLE        100 * time_ns / total (NULL when the trace has no counted GPU op).
WITH g AS MATERIALIZED (
    SELECT trace_id, ts_ns, end_ns, gpu_op_category(kind, name) AS bucket
    FROM gpu_op_events
    WHERE $include_orphans OR NOT orphan
),
-- The sets whose unions give every figure: |A - B| = |A u B| - |B|.
sets AS (
    SELECT {'t': trace_id, 's': bucket} AS grp, ts_ns, end_ns FROM g
    UNION ALL
    SELECT {'t': trace_id, 's': 'compute_or_comm'}, ts_ns, end_ns FROM g WHERE bucket <> 'memcpy'
    UNION ALL
    SELECT {'t': trace_id, 's': 'all'}, ts_ns, end_ns FROM g
),
u AS (
    SELECT grp.t AS trace_id, grp.s AS s, busy_ns, first_ns, last_ns FROM busy_union(sets)
),
p AS (
    SELECT trace_id,
           coalesce(max(busy_ns) FILTER (WHERE s = 'computation'), 0) AS comp,
           coalesce(max(busy_ns) FILTER (WHERE s = 'communication'), 0) AS comm,
           coalesce(max(busy_ns) FILTER (WHERE s = 'memcpy'), 0) AS memcpy,
           coalesce(max(busy_ns) FILTER (WHERE s = 'compute_or_comm'), 0) AS comp_comm,
           coalesce(max(busy_ns) FILTER (WHERE s = 'all'), 0) AS busy,
           coalesce(max(last_ns - first_ns) FILTER (WHERE s = 'all'), 0) AS total
    FROM u GROUP BY trace_id
),
rows AS (
    SELECT trace_id, c.category, c.ord,
           CASE c.category WHEN 'computation' THEN comp WHEN 'communication' THEN comm WHEN 'memcpy' THEN memcpy
                WHEN 'exposed_communication' THEN comp_comm - comp WHEN 'exposed_memcpy' THEN busy - comp_comm
                WHEN 'busy' THEN busy WHEN 'idle' THEN total - busy ELSE total END AS time_ns,
           total
    FROM traces
    LEFT JOIN p USING (trace_id)
    CROSS JOIN (VALUES ('computation', 1), ('communication', 2), ('memcpy', 3), ('exposed_communication', 4),
                       ('exposed_memcpy', 5), ('busy', 6), ('idle', 7), ('total', 8)) AS c(category, ord)
)
SELECT t.trace, r.category, coalesce(r.time_ns, 0)::BIGINT AS time_ns,
       CASE WHEN r.total > 0 THEN 100.0 * r.time_ns / r.total END AS pct
FROM rows r JOIN traces t USING (trace_id)
ORDER BY t.trace, r.ord;
