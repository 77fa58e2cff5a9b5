-- Memory allocated over time per device, from the profiler's [memory] instant events (profile_memory=True).
--
-- One row per [memory] event: an allocation (bytes > 0) or a free (bytes < 0)
-- on a device, with what the caching allocator reported right after it
-- (Total Allocated, Total Reserved; NULL in traces that do not record them)
-- and tracekit's own running sum of the event's bytes from the trace's start
-- (allocations made before profiling began are not in it). peak marks the
-- events where allocated_bytes reaches its maximum for the device.
--
-- @column trace VARCHAR              Trace label.
-- @column device_type VARCHAR        cpu, cuda, hip, mtia, xpu, ... (the event's Device Type; the number when unknown).
-- @column device_id INTEGER          Device index (-1 for the CPU).
-- @column ts_ns BIGINT               Time of the event, ns.
-- @column bytes BIGINT               Bytes allocated (positive) or freed (negative).
-- @column allocated_bytes BIGINT     Total Allocated after the event as the allocator reported it.
-- @column reserved_bytes BIGINT      Total Reserved after the event (the caching allocator's segments).
-- @column running_bytes BIGINT       Running sum of bytes on the device from the trace's first event.
-- @column peak BOOLEAN               allocated_bytes (or running_bytes, when not reported) is the device's maximum here.
WITH m AS (
    SELECT id, trace_id, ts_ns,
           TRY_CAST(json_extract(args, '$."Device Type"') AS INTEGER) AS dtype,
           TRY_CAST(json_extract(args, '$."Device Id"') AS INTEGER) AS device_id,
           TRY_CAST(json_extract(args, '$.Bytes') AS BIGINT) AS bytes,
           TRY_CAST(json_extract(args, '$."Total Allocated"') AS BIGINT) AS allocated_bytes,
           TRY_CAST(json_extract(args, '$."Total Reserved"') AS BIGINT) AS reserved_bytes
    FROM instants
    WHERE name = '[memory]'
),
r AS (
    SELECT *, sum(bytes) OVER (PARTITION BY trace_id, dtype, device_id ORDER BY ts_ns, id ROWS UNBOUNDED PRECEDING)
                  AS running_bytes
    FROM m
)
SELECT t.trace,
       -- c10::DeviceType numbering.
       CASE r.dtype WHEN 0 THEN 'cpu' WHEN 1 THEN 'cuda' WHEN 6 THEN 'hip' WHEN 9 THEN 'xla' WHEN 12 THEN 'xpu'
                    WHEN 13 THEN 'mps' WHEN 20 THEN 'privateuse1' WHEN 23 THEN 'mtia'
                    ELSE CAST(r.dtype AS VARCHAR) END AS device_type,
       r.device_id, r.ts_ns, r.bytes, r.allocated_bytes, r.reserved_bytes, r.running_bytes::BIGINT AS running_bytes,
       coalesce(r.allocated_bytes, r.running_bytes)
           = max(coalesce(r.allocated_bytes, r.running_bytes)) OVER (PARTITION BY r.trace_id, r.dtype, r.device_id)
           AS peak
FROM r JOIN traces t USING (trace_id)
ORDER BY t.trace, device_type, r.device_id, r.ts_ns, r.id;
