-- The GPU waits on the CPU to launch its next op (launch-bound stretches).
--
-- The stream with the most host-wait time (idle_breakdown: gaps where the
-- next GPU op's launch started only after the previous op had finished), when
-- that is at least min_host_wait_pct of the trace's GPU span. One stream per
-- trace, so the time it explains (that host wait) is never more than the span.
--
-- @uses idle_breakdown
-- @uses gpu_breakdown
-- @param min_host_wait_pct DOUBLE = 10   Fire at this share of the span, percent.
-- @column trace VARCHAR          Trace label.
-- @column device INTEGER         GPU index.
-- @column stream BIGINT          Stream.
-- @column host_wait_ns BIGINT    Host-wait time on the stream, nanoseconds.
-- @column span_pct DOUBLE        100 * host_wait_ns / the trace's GPU span.
-- @column host_wait_pct DOUBLE   Share of the stream's idle time that is host wait, percent.
SELECT i.trace, i.device, i.stream, i.host_wait_ns, 100.0 * i.host_wait_ns / s.time_ns AS span_pct, i.host_wait_pct
FROM idle_breakdown i JOIN gpu_breakdown s ON s.trace = i.trace AND s.category = 'total'
WHERE s.time_ns > 0 AND 100.0 * i.host_wait_ns / s.time_ns >= $min_host_wait_pct
QUALIFY row_number() OVER (PARTITION BY i.trace ORDER BY i.host_wait_ns DESC, i.device, i.stream) = 1
ORDER BY i.trace;
