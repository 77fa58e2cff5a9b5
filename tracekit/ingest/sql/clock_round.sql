-- One round of clock alignment: the traces that share a collective instance with an aligned trace.
--
-- Each instance is anchored on one aligned rank (the first by trace_id), so the work is linear in the
-- kernels, whatever the size of the groups; a trace's offset is the median difference of its instances'
-- ends from their anchors'. The caller repeats the round until it adds no trace (the last statement gives
-- how many it added).
--
-- @param source TEXT     The clock_source of an offset found this way (ranks.SOURCE_COLLECTIVES).
-- @reads _job_collectives, _clock_offsets
-- @creates _clock_offsets    (added to: the traces aligned this round)
INSERT INTO _clock_offsets
WITH anchor AS (
    SELECT k.job, k.pg, k.collective, k.instance, k.part,
           arg_min(k.end_ns - o.offset_ns, k.trace_id) AS aligned_end
    FROM _job_collectives k JOIN _clock_offsets o USING (trace_id)
    GROUP BY ALL
)
SELECT u.trace_id, median(u.end_ns - a.aligned_end)::BIGINT, {{source}}
FROM _job_collectives u JOIN anchor a USING (job, pg, collective, instance, part)
WHERE u.trace_id NOT IN (SELECT trace_id FROM _clock_offsets)
GROUP BY u.trace_id;
