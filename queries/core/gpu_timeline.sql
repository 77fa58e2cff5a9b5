-- GPU busy, idle and span time per trace.
--
-- busy_ns is the union of GPU op intervals (kernels, memcpys, memsets) over
-- all streams and devices of the trace, so overlapping streams are not
-- double-counted; span_ns runs from the first GPU op's start to the last
-- one's end; idle_ns = span_ns - busy_ns. By default only GPU ops whose
-- launch is in the trace count (orphans were queued before profiling began
-- and sit at the edge of the window); include_orphans=true counts all.
--
-- @param include_orphans BOOLEAN = false   Also count GPU ops with no launch in the trace.
-- @column trace VARCHAR            Trace label.
-- @column gpu_ops BIGINT           GPU ops in the trace (linked and orphan).
-- @column linked_gpu_ops BIGINT    GPU ops whose launching runtime call is in the trace.
-- @column orphan_gpu_ops BIGINT    GPU ops with no launch in the trace.
-- @column counted_gpu_ops BIGINT   GPU ops counted in busy/span (linked, or all with include_orphans).
-- @column busy_ns BIGINT           Union of counted GPU op intervals, nanoseconds.
-- @column span_ns BIGINT           First counted GPU op start to last end, nanoseconds.
-- @column idle_ns BIGINT           span_ns - busy_ns, nanoseconds.
-- @column busy_pct DOUBLE          100 * busy_ns / span_ns.
WITH counted AS (
    SELECT trace_id, ts_ns, end_ns
    FROM gpu_ops
    WHERE $include_orphans OR NOT orphan
),
ordered AS (
    SELECT trace_id, ts_ns, end_ns,
           max(end_ns) OVER (PARTITION BY trace_id ORDER BY ts_ns, end_ns
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM counted
),
islands AS (
    SELECT trace_id, ts_ns, end_ns,
           sum(CASE WHEN prev_end IS NULL OR ts_ns > prev_end THEN 1 ELSE 0 END)
               OVER (PARTITION BY trace_id ORDER BY ts_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
    FROM ordered
),
busy AS (
    SELECT trace_id, sum(island_ns) AS busy_ns, min(island_start) AS first_ns, max(island_end) AS last_ns
    FROM (SELECT trace_id, island, min(ts_ns) AS island_start, max(end_ns) AS island_end,
                 max(end_ns) - min(ts_ns) AS island_ns
          FROM islands GROUP BY trace_id, island)
    GROUP BY trace_id
),
counts AS (
    SELECT trace_id, count(*) AS gpu_ops, count(*) FILTER (WHERE NOT orphan) AS linked_gpu_ops,
           count(*) FILTER (WHERE orphan) AS orphan_gpu_ops,
           count(*) FILTER (WHERE $include_orphans OR NOT orphan) AS counted_gpu_ops
    FROM gpu_ops GROUP BY trace_id
)
SELECT t.trace,
       coalesce(c.gpu_ops, 0) AS gpu_ops,
       coalesce(c.linked_gpu_ops, 0) AS linked_gpu_ops,
       coalesce(c.orphan_gpu_ops, 0) AS orphan_gpu_ops,
       coalesce(c.counted_gpu_ops, 0) AS counted_gpu_ops,
       coalesce(b.busy_ns, 0)::BIGINT AS busy_ns,
       coalesce(b.last_ns - b.first_ns, 0)::BIGINT AS span_ns,
       coalesce(b.last_ns - b.first_ns - b.busy_ns, 0)::BIGINT AS idle_ns,
       CASE WHEN b.last_ns > b.first_ns THEN round(100.0 * b.busy_ns / (b.last_ns - b.first_ns), 3) END AS busy_pct
FROM traces t
LEFT JOIN counts c USING (trace_id)
LEFT JOIN busy b USING (trace_id)
ORDER BY t.trace;
