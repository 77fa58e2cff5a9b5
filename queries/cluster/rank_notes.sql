-- Why the cross-rank figures cover what they cover: ranks missing, clocks not aligned, communication not matched.
--
-- One row per thing the cluster queries could not do, and why, so that an empty
-- matched_collectives or a NULL clock offset is never left unexplained
-- ('tracekit query' prints these rows as notes after every cluster query):
--
-- - ranks: the ranks present against the job's world_size (distributedInfo or
--   the capture module's metadata), when fewer are present; or a trace with no
--   rank recorded.
-- - clock: a trace whose clock could not be aligned (traces.clock_offset_ns
--   NULL, so matched_collectives.start_ns is NULL): no communication kernels, no
--   peer recorded for its point-to-point ones, or none of its collectives found
--   on an aligned rank.
-- - matching: a trace's communication kernels that matched no other rank, with
--   the reason (no other rank of the job has communication; point-to-point
--   kernels with no peer recorded; the rest found on no other rank).
-- - order: collectives matched by order of occurrence (no Seq: PyTorch before
--   2.4), which is right only when every rank's profiling window starts at the
--   same collective.
--
-- @uses matched_collectives
-- @column job VARCHAR         Job (traces.job; NULL: no job id recorded).
-- @column trace VARCHAR       Trace the note is about (NULL: the whole job).
-- @column rank INTEGER        Its rank.
-- @column topic VARCHAR       ranks, clock, matching or order.
-- @column kernels BIGINT      Communication kernels concerned (NULL for ranks).
-- @column comm_ns BIGINT      Their summed GPU time, ns (NULL for ranks).
-- @column note VARCHAR        What could not be done, and why.
WITH t AS (
    SELECT trace_id, trace, rank, world_size, job, coalesce(job, '') AS job_key, clock_offset_ns FROM traces
),
k AS (
    SELECT c.trace_id, c.id, c.dur_ns, c.p2p, c.match_key, c.matched_on FROM collective_kernels c
),
matched AS (
    SELECT DISTINCT trace FROM matched_collectives
),
per_trace AS (
    SELECT t.*, count(k.id) AS kernels, coalesce(sum(k.dur_ns), 0)::BIGINT AS comm_ns,
           count(k.id) FILTER (WHERE k.match_key IS NULL) AS no_peer,
           coalesce(sum(k.dur_ns) FILTER (WHERE k.match_key IS NULL), 0)::BIGINT AS no_peer_ns,
           count(k.id) FILTER (WHERE k.match_key IS NOT NULL) AS matchable,
           t.trace IN (SELECT trace FROM matched) AS any_matched
    FROM t LEFT JOIN k USING (trace_id)
    GROUP BY ALL
),
jobs AS (
    SELECT job_key, any_value(job) AS job, count(*) AS traces, count(DISTINCT rank) AS ranks, max(world_size) AS world,
           list(DISTINCT rank ORDER BY rank) FILTER (WHERE rank IS NOT NULL) AS present,
           count(*) FILTER (WHERE kernels > 0) AS with_comm
    FROM per_trace GROUP BY job_key
),
-- Kernels of each trace found on another rank (matched_collectives rows are per kernel).
found AS (
    SELECT trace, count(*) AS kernels FROM matched_collectives GROUP BY trace
),
ordered AS (
    SELECT job, count(DISTINCT (pg, collective, instance)) AS instances, count(DISTINCT trace) AS traces
    FROM matched_collectives WHERE matched_on = 'order' GROUP BY job
),
notes AS (
    SELECT j.job, NULL::VARCHAR AS trace, NULL::INTEGER AS rank, 'ranks' AS topic, NULL::BIGINT AS kernels,
           NULL::BIGINT AS comm_ns,
           concat(CASE WHEN j.job IS NULL THEN '' ELSE concat('job ', j.job, ': ') END,
                  j.ranks, ' of world_size ', j.world, ' ranks present (',
                  CASE WHEN len(j.present) <= 16 THEN array_to_string(j.present, ', ')
                       ELSE concat(array_to_string(j.present[1:16], ', '), ', ...') END,
                  '): the cross-rank figures cover only these') AS note
    FROM jobs j WHERE j.world > j.ranks
    UNION ALL
    SELECT job, trace, rank, 'ranks', NULL, NULL,
           concat(trace, ' has no rank recorded (no distributedInfo, capture metadata or rank in its file name): ',
                  'its point-to-point kernels cannot be matched')
    FROM per_trace WHERE rank IS NULL
    UNION ALL
    SELECT p.job, p.trace, p.rank, 'clock', p.kernels, p.comm_ns,
           concat(coalesce('rank ' || p.rank, p.trace), '''s clock is not aligned (clock_offset_ns NULL, start_ns NULL): ',
                  CASE WHEN p.kernels = 0 THEN 'its trace has no communication kernels to align by'
                       WHEN p.matchable = 0 THEN concat('its ', p.kernels,
                                                        ' point-to-point kernels record no peer to align by')
                       ELSE concat('none of its ', p.matchable, ' communication kernels was found on an aligned rank',
                                   ' (other process groups, or profiling windows that do not overlap)') END)
    FROM per_trace p WHERE p.clock_offset_ns IS NULL
    UNION ALL
    SELECT p.job, p.trace, p.rank, 'matching', p.kernels, p.comm_ns,
           concat(coalesce('rank ' || p.rank, p.trace), ': its ', p.kernels,
                  ' communication kernels matched nothing: no other rank of ',
                  CASE WHEN p.job IS NULL THEN 'the job' ELSE 'job ' || p.job END,
                  ' has communication kernels',
                  CASE WHEN j.traces = 1 THEN ' (it is the only trace loaded)' ELSE '' END)
    FROM per_trace p JOIN jobs j USING (job_key) WHERE p.kernels > 0 AND j.with_comm = 1
    UNION ALL
    SELECT p.job, p.trace, p.rank, 'matching', p.no_peer, p.no_peer_ns,
           concat(coalesce('rank ' || p.rank, p.trace), ': ', p.no_peer,
                  ' point-to-point kernels not matched: no peer recorded (no "Dst Rank"/"Src Rank" or "Rank" ',
                  'args, and neither the group nor the job has two ranks)')
    FROM per_trace p JOIN jobs j USING (job_key) WHERE p.no_peer > 0 AND j.with_comm > 1
    UNION ALL
    SELECT p.job, p.trace, p.rank, 'matching', p.matchable - coalesce(f.kernels, 0), NULL,
           concat(coalesce('rank ' || p.rank, p.trace), ': ', p.matchable - coalesce(f.kernels, 0), ' of its ',
                  p.matchable, ' matchable communication kernels were found on no other rank',
                  ' (their peers'' traces are not loaded, or their profiling windows differ)')
    FROM per_trace p JOIN jobs j USING (job_key) LEFT JOIN found f USING (trace)
    WHERE j.with_comm > 1 AND p.matchable > coalesce(f.kernels, 0)
    UNION ALL
    SELECT o.job, NULL, NULL, 'order', NULL, NULL,
           concat(CASE WHEN o.job IS NULL THEN '' ELSE concat('job ', o.job, ': ') END, o.instances,
                  ' collectives carry no Seq (PyTorch before 2.4, or Gloo, which records none) and were matched by order ',
                  'of occurrence: ',
                  'right only if every rank''s profiling window starts at the same collective')
    FROM ordered o
)
SELECT job, trace, rank, topic, kernels, comm_ns, note FROM notes
ORDER BY job NULLS FIRST, CASE topic WHEN 'ranks' THEN 0 WHEN 'clock' THEN 1 WHEN 'matching' THEN 2 ELSE 3 END,
         rank NULLS FIRST, trace NULLS FIRST, note;
