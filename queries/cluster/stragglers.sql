-- The ranks the others waited for: one row per rank, the worst straggler first.
--
-- Built on matched_collectives: for every collective instance (and every
-- point-to-point transfer matched by its peer) the rank that arrived last (its
-- kernel was the shortest: the others had started and waited for it) is
-- charged the time all the others waited. Lateness is read from the kernels'
-- durations, so clock offsets between hosts do not matter; NCCL's
-- ncclKernel_*/ncclDevKernel_* and RCCL kernels count (is_collective_kernel).
-- Every trace gets a row, those without matched collectives with zeros;
-- 'tracekit query' says in a note why a rank's communication matched nothing.
--
-- @uses matched_collectives
-- @column trace VARCHAR            Trace label.
-- @column rank INTEGER             The trace's rank.
-- @column collectives BIGINT       Matched collective instances (and point-to-point transfers) the rank took part in.
-- @column last_arrivals BIGINT     Of those, the ones it arrived at last (the others waited for it).
-- @column wait_caused_ns BIGINT    Time the other ranks waited for it, summed over those instances, ns.
-- @column matched_on VARCHAR       What its instances were matched on (matched_collectives.matched_on, each kind once: "Seq", "order", "peer and order"); NULL when nothing matched.
WITH per_rank AS (
    SELECT trace, count(*) AS collectives, count(*) FILTER (WHERE last_arrival) AS last_arrivals,
           sum(wait_caused_ns)::BIGINT AS wait_caused_ns,
           string_agg(DISTINCT matched_on, ', ' ORDER BY matched_on) AS matched_on
    FROM matched_collectives
    GROUP BY trace
)
SELECT t.trace, t.rank, coalesce(p.collectives, 0) AS collectives, coalesce(p.last_arrivals, 0) AS last_arrivals,
       coalesce(p.wait_caused_ns, 0)::BIGINT AS wait_caused_ns, p.matched_on
FROM traces t LEFT JOIN per_rank p USING (trace)
ORDER BY wait_caused_ns DESC, last_arrivals DESC, t.rank NULLS LAST, t.trace;
