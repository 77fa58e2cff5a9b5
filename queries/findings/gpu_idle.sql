-- The GPU idles for much of the span of its work.
--
-- Per device: the time in the device's span (its first GPU op's start to the
-- last one's end) with no GPU op running on any of its streams. Fires for a
-- device when that is at least min_idle_pct of its span; the time it
-- explains is the idle time. When launch_bound fires for the same device
-- (most of that time is host wait) the report shows that finding instead.
-- Orphans (no launch in the trace) are left out.
--
-- @param min_idle_pct DOUBLE = 30   Fire at this idle share of the device's span, percent.
-- @column trace VARCHAR    Trace label.
-- @column device INTEGER   GPU index.
-- @column time_ns BIGINT   Idle time, nanoseconds.
-- @column span_ns BIGINT   The device's span, nanoseconds.
-- @column pct DOUBLE       100 * time_ns / span_ns.
WITH ops AS (
    SELECT trace_id, device, ts_ns, end_ns,
           max(end_ns) OVER (PARTITION BY trace_id, device ORDER BY ts_ns, end_ns, id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM gpu_ops
    WHERE NOT orphan
),
devices AS (
    SELECT trace_id, device, (max(end_ns) - min(ts_ns))::BIGINT AS span_ns,
           coalesce(sum(greatest(ts_ns - prev_end, 0)), 0)::BIGINT AS time_ns
    FROM ops
    GROUP BY trace_id, device
)
SELECT t.trace, d.device, d.time_ns, d.span_ns, 100.0 * d.time_ns / d.span_ns AS pct
FROM devices d
JOIN traces t USING (trace_id)
WHERE d.span_ns > 0 AND 100.0 * d.time_ns / d.span_ns >= $min_idle_pct
ORDER BY t.trace, d.time_ns DESC, d.device;
