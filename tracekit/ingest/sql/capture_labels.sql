-- Every trace with what tracekit capture recorded in it: trace_id, label, impl, device and rank.
--
-- @fragment
-- @reads traces
SELECT trace_id, trace, metadata->>'$.tracekit_capture.impl', metadata->>'$.tracekit_capture.device', rank
FROM traces ORDER BY trace_id
