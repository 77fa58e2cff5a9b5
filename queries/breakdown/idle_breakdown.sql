-- GPU idle time per stream, split into host wait, kernel wait and other: HTA's idle-time breakdown.
--
-- Per trace, device and stream, GPU ops sorted by start: each op's idle
-- interval is its start minus the previous op's end on that stream (none
-- before the first op; overlaps count 0). The interval is host wait when the
-- op's launching runtime call started after the previous op ended (the GPU
-- waited for the CPU); else kernel wait when it is shorter than
-- consecutive_kernel_delay_ns (the launch overhead between back-to-back
-- kernels); else other (waiting on another stream's event, a sync, ...).
-- HTA's threshold defaults to 30 in its own unit, microseconds (its docs say
-- ns), hence 30000 ns here. HTA rounds times to whole microseconds and drops
-- the last profiler step; tracekit's figures are exact ns over the whole
-- trace. GPU ops with no launch in the trace are never host wait.
--
-- @param include_orphans BOOLEAN = false             Also count GPU ops launched before the trace began.
-- @param consecutive_kernel_delay_ns BIGINT = 30000  Gaps shorter than this are kernel wait, nanoseconds.
-- @column trace VARCHAR           Trace label.
-- @column device INTEGER          GPU index.
-- @column stream BIGINT           Stream.
-- @column gpu_ops BIGINT          GPU ops on the stream.
-- @column idle_ns BIGINT          Summed gaps between consecutive GPU ops, nanoseconds.
-- @column host_wait_ns BIGINT     Gaps where the next op's launch came after the previous op ended, nanoseconds.
-- @column kernel_wait_ns BIGINT   Other gaps shorter than consecutive_kernel_delay_ns, nanoseconds.
-- @column other_ns BIGINT         The remaining gaps, nanoseconds.
-- @column host_wait_pct DOUBLE    100 * host_wait_ns / idle_ns.
-- @column kernel_wait_pct DOUBLE  100 * kernel_wait_ns / idle_ns.
-- @column other_pct DOUBLE        100 * other_ns / idle_ns.
WITH ops AS (
    SELECT trace_id, device, stream, ts_ns, end_ns, launch_ts_ns,
           max(end_ns) OVER (PARTITION BY trace_id, device, stream ORDER BY ts_ns, end_ns, id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM gpu_ops
    WHERE $include_orphans OR NOT orphan
),
gaps AS (
    SELECT trace_id, device, stream, greatest(ts_ns - prev_end, 0) AS gap,
           CASE WHEN launch_ts_ns > prev_end THEN 'host'
                WHEN ts_ns - prev_end < $consecutive_kernel_delay_ns THEN 'kernel' ELSE 'other' END AS cause
    FROM ops
),
per_stream AS (
    SELECT trace_id, device, stream, count(*) AS gpu_ops,
           coalesce(sum(gap), 0)::BIGINT AS idle_ns,
           coalesce(sum(gap) FILTER (WHERE cause = 'host'), 0)::BIGINT AS host_wait_ns,
           coalesce(sum(gap) FILTER (WHERE cause = 'kernel'), 0)::BIGINT AS kernel_wait_ns,
           coalesce(sum(gap) FILTER (WHERE cause = 'other'), 0)::BIGINT AS other_ns
    FROM gaps GROUP BY trace_id, device, stream
)
SELECT t.trace, p.device, p.stream, p.gpu_ops, p.idle_ns, p.host_wait_ns, p.kernel_wait_ns, p.other_ns,
       CASE WHEN p.idle_ns > 0 THEN 100.0 * p.host_wait_ns / p.idle_ns END AS host_wait_pct,
       CASE WHEN p.idle_ns > 0 THEN 100.0 * p.kernel_wait_ns / p.idle_ns END AS kernel_wait_pct,
       CASE WHEN p.idle_ns > 0 THEN 100.0 * p.other_ns / p.idle_ns END AS other_pct
FROM per_stream p JOIN traces t USING (trace_id)
ORDER BY t.trace, p.device, p.stream;
