-- The GPU idles for much of the span of its work.
--
-- Fires when gpu_breakdown's idle share of the span (first counted GPU op's
-- start to the last one's end) is at least min_idle_pct. The time it explains
-- is the idle time.
--
-- @uses gpu_breakdown
-- @param min_idle_pct DOUBLE = 30   Fire at this idle share of the span, percent.
-- @column trace VARCHAR    Trace label.
-- @column time_ns BIGINT   Idle time, nanoseconds.
-- @column span_ns BIGINT   Span of the counted GPU ops, nanoseconds.
-- @column pct DOUBLE       100 * time_ns / span_ns.
SELECT i.trace, i.time_ns, s.time_ns AS span_ns, i.pct
FROM gpu_breakdown i JOIN gpu_breakdown s ON s.trace = i.trace AND s.category = 'total'
WHERE i.category = 'idle' AND i.pct >= $min_idle_pct
ORDER BY i.trace;
