-- Each job's clock reference and the collectives its ranks are aligned by.
--
-- The reference of a job is its lowest rank among the traces with collectives (else its lowest rank): its
-- clock offset is 0. Point-to-point traffic is left out (only collectives are matched across ranks).
--
-- @param reference TEXT   The clock_source of a job's reference (ranks.SOURCE_REFERENCE).
-- @reads collective_kernels, traces
-- @creates _job_collectives  Each collective kernel of a job: trace_id, job, pg, collective, instance, part, end_ns.
-- @creates _clock_offsets    Each aligned trace: offset_ns (what to subtract from its times) and source.
CREATE OR REPLACE TEMP TABLE _job_collectives AS
SELECT c.trace_id, coalesce(t.job, '') AS job, c.pg, c.collective, c.instance, c.part, c.end_ns
FROM collective_kernels c JOIN traces t USING (trace_id) WHERE NOT c.p2p;

CREATE OR REPLACE TEMP TABLE _clock_offsets AS
SELECT trace_id, 0::BIGINT AS offset_ns, {{reference}} AS source FROM (
    SELECT t.trace_id, row_number() OVER (
        PARTITION BY coalesce(t.job, '')
        ORDER BY t.trace_id IN (SELECT trace_id FROM _job_collectives) DESC, t.rank NULLS LAST, t.trace_id) AS n
    FROM traces t)
WHERE n = 1;
