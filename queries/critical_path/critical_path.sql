-- The critical path of one region instance per trace: the longest path of its dependency graph, edge by edge.
--
-- The longest path (HTA's critical_path_analysis) of critical_path_graph,
-- its launch_order edges left out: the chain of CPU calls, launches, GPU ops,
-- gaps and synchronizations that decided how long the region took, in path
-- order (seq from 1). Its length (the sum of time_ns) is at most span_ns of
-- the graph; what is not on it overlapped with it. kind says what each edge
-- is (cpu, cpu_gap, launch_delay, kernel, communication, kernel_gap, sync),
-- stage and call_id the attention stage and call of the event the edge is
-- attributed to. With cross_rank the path runs through the ranks of a job
-- (one path per job; trace and rank say whose edge each is, a collective
-- edge is the late rank's). See docs/critical_path.md for the graph and the
-- differences from HTA.
--
-- @uses critical_path_graph
-- @column trace VARCHAR     Trace label.
-- @column rank INTEGER      The trace's rank (traces.rank; NULL when none was recorded).
-- @column region VARCHAR    The region instance's range name, e.g. ProfilerStep#4 ("(trace)" for the whole trace).
-- @column instance BIGINT   The instance, from 0.
-- @column seq BIGINT        Position on the path, from 1.
-- @column kind VARCHAR      cpu, cpu_gap, launch_delay, kernel, communication, kernel_gap, sync or collective.
-- @column from_id BIGINT    Event at the edge's start (events.id).
-- @column to_id BIGINT      Event at the edge's end (events.id).
-- @column time_ns BIGINT    Time the edge adds to the path, ns.
-- @column stage VARCHAR     Attention stage of the event the edge is attributed to (other when none).
-- @column call_id BIGINT    Its attention call (attention_calls.call_id), NULL outside one.
WITH solved AS (
    SELECT graph,
           list(g ORDER BY edge) AS edges,
           critical_path_solve(list(from_id * 2 + from_end::INT ORDER BY edge),
                               list(to_id * 2 + to_end::INT ORDER BY edge),
                               list(time_ns ORDER BY edge)) AS path
    FROM critical_path_graph g
    WHERE kind <> 'launch_order'
    GROUP BY graph
),
path AS (
    SELECT graph, unnest(list_select(edges, path)) AS e, generate_subscripts(path, 1) AS seq
    FROM solved
)
SELECT e.trace, e.rank, e.region, e.instance, seq, e.kind, e.from_id, e.to_id, e.time_ns, e.stage, e.call_id
FROM path
ORDER BY graph, seq
