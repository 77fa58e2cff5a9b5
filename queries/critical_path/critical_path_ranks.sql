-- Which rank holds a job's critical path across its ranks, next to the ranks the others waited for.
--
-- critical_path with cross_rank (the ranks of a job joined through their
-- collectives: a collective ends when its last rank arrives) split by the
-- rank each edge belongs to: path_ns is the time of the job's path spent on
-- this rank's work (a collective edge counts for the late rank), top_stage
-- the attention stage holding most of it. last_arrivals and wait_caused_ns
-- come from stragglers (who arrived last at matched collectives and how long
-- the others waited), so a rank that holds the path because it is late
-- stands out in both. Ranks with no edge on the path show 0.
--
-- @param cross_rank BOOLEAN = true   Join the ranks of a job (false: each trace's own path).
-- @uses critical_path
-- @uses stragglers
-- @column trace VARCHAR           Trace label.
-- @column rank INTEGER            The trace's rank.
-- @column path_ns BIGINT          Time of the job's critical path on this rank, ns.
-- @column path_pct DOUBLE         100 * path_ns / the job's path length (per trace without cross_rank).
-- @column top_stage VARCHAR       The attention stage with the most path time on this rank (other: outside attention).
-- @column top_stage_ns BIGINT     Its path time, ns.
-- @column last_arrivals BIGINT    Matched collectives this rank arrived at last (stragglers).
-- @column wait_caused_ns BIGINT   Time the other ranks waited for it (stragglers), ns.
WITH per_stage AS (
    SELECT trace, stage, sum(time_ns) AS ns FROM critical_path GROUP BY trace, stage
),
per_rank AS (
    SELECT trace, sum(ns)::BIGINT AS path_ns, arg_max(stage, (ns, stage)) AS top_stage, max(ns)::BIGINT AS top_stage_ns
    FROM per_stage GROUP BY trace
),
joined AS (
    SELECT s.trace, s.rank, coalesce(p.path_ns, 0)::BIGINT AS path_ns, p.top_stage, p.top_stage_ns,
           s.last_arrivals, s.wait_caused_ns
    FROM stragglers s LEFT JOIN per_rank p USING (trace)
)
SELECT trace, rank, path_ns,
       CASE WHEN sum(path_ns) OVER t > 0
            THEN round(100.0 * path_ns / sum(path_ns) OVER t, 3) END AS path_pct,
       top_stage, top_stage_ns, last_arrivals, wait_caused_ns
FROM joined
WINDOW t AS (PARTITION BY CASE WHEN $cross_rank THEN '' ELSE trace END)
ORDER BY path_ns DESC, rank NULLS LAST, trace
