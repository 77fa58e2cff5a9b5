-- The critical path by attention stage, next to each stage's share of the region's GPU time.
--
-- How much of the region's critical path each attention stage holds (path_ns,
-- path_pct: the edges attributed to events of that stage, GPU ops, their
-- launches and the CPU calls of the stage), and its share of the GPU time of
-- the ops the region launched (gpu_ns, gpu_pct). A stage can be 30 % of GPU
-- time and 5 % of the path when it overlaps with other work, or the reverse:
-- path_pct is what speeding it up can win at most (critical_path_whatif
-- says how much it does win). Edges attributed to no event (cpu_gap, sync)
-- count as other. With cross_rank one set of rows per job (trace is the job):
-- the stages of the job's path across its ranks.
--
-- @uses critical_path_graph
-- @column trace VARCHAR     Trace label (with cross_rank: the job, "" without one).
-- @column rank INTEGER      The trace's rank (traces.rank; NULL when none was recorded or with cross_rank).
-- @column region VARCHAR    The region instance's range name.
-- @column instance BIGINT   The instance, from 0.
-- @column stage VARCHAR     Attention stage (other: everything outside attention).
-- @column path_ns BIGINT    Time of the stage on the critical path, ns.
-- @column path_pct DOUBLE   100 * path_ns / the path's length.
-- @column gpu_ns BIGINT     Summed duration of the stage's GPU ops launched in the region, ns.
-- @column gpu_pct DOUBLE    100 * gpu_ns / the GPU time of all of the region's GPU ops.
WITH solved AS (
    SELECT graph AS trace, CASE WHEN count(DISTINCT trace) = 1 THEN any_value(rank) END AS rank,
           any_value(region) AS region, any_value(instance) AS instance,
           list(struct_pack(stage, time_ns) ORDER BY edge) AS edges,
           critical_path_solve(list(from_id * 2 + from_end::INT ORDER BY edge),
                               list(to_id * 2 + to_end::INT ORDER BY edge),
                               list(time_ns ORDER BY edge)) AS path
    FROM critical_path_graph
    WHERE kind <> 'launch_order'
    GROUP BY graph
),
on_path AS (
    SELECT trace, e.stage, sum(e.time_ns)::BIGINT AS path_ns
    FROM (SELECT trace, unnest(list_select(edges, path)) AS e FROM solved)
    GROUP BY trace, e.stage
),
gpu AS (
    SELECT graph AS trace, stage, sum(time_ns)::BIGINT AS gpu_ns
    FROM critical_path_graph WHERE gpu
    GROUP BY ALL
),
stages AS (
    SELECT trace, stage FROM on_path UNION SELECT trace, stage FROM gpu
),
rows AS (
    SELECT s.trace, v.rank, v.region, v.instance, s.stage, coalesce(p.path_ns, 0)::BIGINT AS path_ns,
           coalesce(g.gpu_ns, 0)::BIGINT AS gpu_ns
    FROM stages s
    JOIN solved v ON v.trace = s.trace
    LEFT JOIN on_path p ON p.trace = s.trace AND p.stage = s.stage
    LEFT JOIN gpu g ON g.trace = s.trace AND g.stage = s.stage
)
SELECT trace, rank, region, instance, stage, path_ns,
       CASE WHEN sum(path_ns) OVER t > 0 THEN round(100.0 * path_ns / sum(path_ns) OVER t, 3) END AS path_pct,
       gpu_ns,
       CASE WHEN sum(gpu_ns) OVER t > 0 THEN round(100.0 * gpu_ns / sum(gpu_ns) OVER t, 3) END AS gpu_pct
FROM rows
WINDOW t AS (PARTITION BY trace)
ORDER BY trace, path_ns DESC, gpu_ns DESC, stage
