-- GPU busy, idle and span time per trace.
--
-- busy_ns is the union of GPU op intervals (kernels, memcpys, memsets) over
-- all streams and devices of the trace, so overlapping streams are not
-- double-counted; span_ns runs from the first GPU op's start to the last
-- one's end; idle_ns = span_ns - busy_ns. By default GPU ops launched before
-- the trace began (orphans: a correlation id whose launch is not in the
-- trace; they sit at the edge of the window) are left out, and GPU ops that
-- carry no correlation id at all (device-side work such as MTIA DMA) count;
-- include_orphans=true counts all.
--
-- @param include_orphans BOOLEAN = false   Also count GPU ops launched before the trace began.
-- @column trace VARCHAR            Trace label.
-- @column gpu_ops BIGINT           GPU ops in the trace (linked and not).
-- @column linked_gpu_ops BIGINT    GPU ops whose launching runtime call is in the trace.
-- @column orphan_gpu_ops BIGINT    GPU ops launched before the trace began (a correlation id, no launch in the trace).
-- @column counted_gpu_ops BIGINT   GPU ops counted in busy/span (all but orphans; all with include_orphans).
-- @column busy_ns BIGINT           Union of counted GPU op intervals, nanoseconds.
-- @column span_ns BIGINT           First counted GPU op start to last end, nanoseconds.
-- @column idle_ns BIGINT           span_ns - busy_ns, nanoseconds.
-- @column busy_pct DOUBLE          100 * busy_ns / span_ns.
WITH g AS MATERIALIZED (
    -- gpu_op_events: the rows of gpu_ops, linked or not, without the link step.
    SELECT trace_id, ts_ns, end_ns, linked, orphan
    FROM gpu_op_events
),
counted AS (
    SELECT trace_id AS grp, ts_ns, end_ns
    FROM g
    WHERE $include_orphans OR NOT orphan
),
busy AS (
    SELECT grp AS trace_id, busy_ns, first_ns, last_ns FROM busy_union(counted)
),
counts AS (
    SELECT trace_id, count(*) AS gpu_ops, count(*) FILTER (WHERE linked) AS linked_gpu_ops,
           count(*) FILTER (WHERE orphan) AS orphan_gpu_ops,
           count(*) FILTER (WHERE $include_orphans OR NOT orphan) AS counted_gpu_ops
    FROM g GROUP BY trace_id
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
