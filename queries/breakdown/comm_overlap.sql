-- Communication overlapped by computation, per trace (one rank): HTA's comm/comp overlap.
--
-- Communication: kernels (and memsets) in gpu_breakdown's communication bucket
-- (names with nccl/rccl, any case, or cross_device_reduce: the project's one
-- definition; HTA itself counts only names matching ^nccl.*Kernel). Computation:
-- every other kernel except those HTA counts as memory or sync (names starting
-- dma or Memset, or containing Memcpy or Sync), so a ROCm rocclr copy kernel
-- computes here as in HTA (gpu_breakdown files it under memcpy, as TraceLens
-- does). Both are merged per device (all streams); overlapped_ns is the time
-- where a communication and a computation interval of the same device are
-- both active, comm_ns the merged communication time, summed over the trace's
-- devices. overlap_pct = 100 * overlapped_ns / comm_ns (HTA reports the ratio,
-- 0-1). HTA rounds every event to whole microseconds, counts CUDA sync events
-- on a stream as computation and drops the last profiler step; tracekit is
-- exact in nanoseconds over the whole trace, counts GPU ops only, and by
-- default leaves out GPU ops launched before the trace began
-- (include_orphans=true counts them, as HTA does).
--
-- @param include_orphans BOOLEAN = false   Also count GPU ops launched before the trace began.
-- @column trace VARCHAR        Trace label.
-- @column rank INTEGER         Distributed rank (traces.rank; NULL when unknown).
-- @column comm_ns BIGINT       Merged communication kernel time, nanoseconds.
-- @column overlapped_ns BIGINT Communication time overlapped by computation kernels, nanoseconds.
-- @column overlap_pct DOUBLE   100 * overlapped_ns / comm_ns (NULL without communication).
WITH g AS MATERIALIZED (
    SELECT trace_id, pid, ts_ns, end_ns,
           CASE WHEN gpu_op_category(kind, name) = 'communication' THEN 'comm'
                WHEN kind = 'kernel' AND NOT regexp_matches(name, '^dma|^Memset|Memcpy|Sync') THEN 'comp' END AS side
    FROM gpu_op_events
    WHERE $include_orphans OR NOT orphan
),
sets AS (
    SELECT {'t': trace_id, 'd': pid, 's': side} AS grp, ts_ns, end_ns FROM g WHERE side IS NOT NULL
    UNION ALL
    SELECT {'t': trace_id, 'd': pid, 's': 'both'}, ts_ns, end_ns FROM g WHERE side IS NOT NULL
),
u AS (
    SELECT grp.t AS trace_id, grp.d AS pid, grp.s AS s, busy_ns FROM busy_union(sets)
),
per_device AS (
    SELECT trace_id, pid,
           coalesce(max(busy_ns) FILTER (WHERE s = 'comm'), 0) AS comm,
           coalesce(max(busy_ns) FILTER (WHERE s = 'comp'), 0) AS comp,
           coalesce(max(busy_ns) FILTER (WHERE s = 'both'), 0) AS both_
    FROM u GROUP BY trace_id, pid
),
per_trace AS (
    -- |comm n comp| = |comm| + |comp| - |comm u comp|
    SELECT trace_id, sum(comm)::BIGINT AS comm_ns, sum(comm + comp - both_)::BIGINT AS overlapped_ns
    FROM per_device GROUP BY trace_id
)
SELECT t.trace, t.rank, coalesce(p.comm_ns, 0)::BIGINT AS comm_ns, coalesce(p.overlapped_ns, 0)::BIGINT AS overlapped_ns,
       CASE WHEN p.comm_ns > 0 THEN 100.0 * p.overlapped_ns / p.comm_ns END AS overlap_pct
FROM traces t
LEFT JOIN per_trace p USING (trace_id)
ORDER BY t.rank NULLS LAST, t.trace;
