-- The clock offsets found, written into traces.clock_offset_ns and clock_source.
--
-- @reads _clock_offsets
-- @creates traces
UPDATE traces SET clock_offset_ns = o.offset_ns, clock_source = o.source
FROM _clock_offsets o WHERE traces.trace_id = o.trace_id;

DROP TABLE _job_collectives;

DROP TABLE _clock_offsets;
