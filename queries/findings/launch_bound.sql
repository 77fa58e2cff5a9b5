-- The GPU waits on the CPU to launch its next op (launch-bound stretches).
--
-- Judged per device, where it is true: the device is idle between two GPU
-- ops when no op of any of its streams runs (the gaps between the union of
-- its ops' intervals), and such a gap is host wait when the op that ends it
-- was launched (its runtime call began) only after the device went idle: the
-- GPU had nothing queued and waited on the CPU's launch path. So a device's
-- host wait is never more than its idle time, and a side stream's own gaps
-- (idle_breakdown, per stream) never count while another stream keeps the
-- device busy. Fires for a device when its host wait is at least
-- min_host_wait_pct of its span (first GPU op's start to the last one's end).
-- Orphans (no launch in the trace) are left out. The gpu_idle finding on the
-- same device is left out when this one fires: the same time, told once.
--
-- @param min_host_wait_pct DOUBLE = 10   Fire at this share of the device's span, percent.
-- @column trace VARCHAR          Trace label.
-- @column device INTEGER         GPU index.
-- @column gpu_ops BIGINT         GPU ops on the device.
-- @column span_ns BIGINT         The device's first GPU op's start to its last one's end, nanoseconds.
-- @column idle_ns BIGINT         Time in the span with no GPU op on the device, nanoseconds.
-- @column host_wait_ns BIGINT    Of idle_ns, the gaps ended by an op launched after the device went idle, nanoseconds.
-- @column span_pct DOUBLE        100 * host_wait_ns / span_ns.
-- @column idle_pct DOUBLE        100 * idle_ns / span_ns.
WITH ops AS (
    SELECT trace_id, device, ts_ns, end_ns, launch_ts_ns,
           max(end_ns) OVER (PARTITION BY trace_id, device ORDER BY ts_ns, end_ns, id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM gpu_ops
    WHERE NOT orphan
),
devices AS (
    SELECT trace_id, device, count(*) AS gpu_ops, (max(end_ns) - min(ts_ns))::BIGINT AS span_ns,
           coalesce(sum(greatest(ts_ns - prev_end, 0)), 0)::BIGINT AS idle_ns,
           coalesce(sum(greatest(ts_ns - prev_end, 0)) FILTER (WHERE launch_ts_ns > prev_end), 0)::BIGINT
               AS host_wait_ns
    FROM ops
    GROUP BY trace_id, device
)
SELECT t.trace, d.device, d.gpu_ops, d.span_ns, d.idle_ns, d.host_wait_ns,
       100.0 * d.host_wait_ns / d.span_ns AS span_pct, 100.0 * d.idle_ns / d.span_ns AS idle_pct
FROM devices d
JOIN traces t USING (trace_id)
WHERE d.span_ns > 0 AND 100.0 * d.host_wait_ns / d.span_ns >= $min_host_wait_pct
ORDER BY t.trace, d.host_wait_ns DESC, d.device;
