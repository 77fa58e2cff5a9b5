-- Each job's clock reference and the collectives its ranks are aligned by.
--
-- The reference of a job is its lowest rank among the traces with collectives (else its lowest rank): its
-- clock offset is 0. Point-to-point transfers count when their peer is known (their two kernels end
-- together too); those whose peer is not recorded cannot be matched and are left out.
--
-- @param reference TEXT   The clock_source of a job's reference (ranks.SOURCE_REFERENCE).
-- @reads collective_kernels, traces
-- @creates _job_collectives  Each matchable communication kernel of a job: trace_id, job, pg, collective (its match_key), instance, part, end_ns.
-- @creates _clock_offsets    Each aligned trace: offset_ns (what to subtract from its times) and source.
CREATE OR REPLACE TEMP TABLE _job_collectives AS
SELECT c.trace_id, coalesce(t.job, '') AS job, c.pg, c.match_key AS collective, c.instance, c.part, c.end_ns
FROM collective_kernels c JOIN traces t USING (trace_id) WHERE c.match_key IS NOT NULL;

CREATE OR REPLACE TEMP TABLE _clock_offsets AS
SELECT trace_id, 0::BIGINT AS offset_ns, {{reference}} AS source FROM (
    SELECT t.trace_id, row_number() OVER (
        PARTITION BY coalesce(t.job, '')
        ORDER BY t.trace_id IN (SELECT trace_id FROM _job_collectives) DESC, t.rank NULLS LAST, t.trace_id) AS n
    FROM traces t)
WHERE n = 1;
