-- CUDA/HIP graph launches: the kernels each replay ran, per graph.
--
-- One row per trace and graph, where a graph is identified by the launch's
-- args (graph id when Kineto records one) or else by the sequence of kernel
-- names it ran: replays of one captured graph run the same kernels. For each
-- graph: how many launches, GPU ops per launch, the CPU time of the launch
-- calls and the GPU time of what they ran (first GPU op start to last end per
-- launch, and the summed durations). Kernels from graphs have no CPU op of
-- their own; op_summary lists them under the op around cudaGraphLaunch.
--
-- @column trace VARCHAR             Trace label.
-- @column api VARCHAR               cudaGraphLaunch, hipGraphLaunch, ...
-- @column graph VARCHAR             The graph's id as recorded (args.graph id), else g<n> numbered by first launch.
-- @column launches BIGINT           Launch calls of this graph.
-- @column gpu_ops_per_launch DOUBLE GPU ops per launch.
-- @column kernels BIGINT            Distinct GPU op names the graph runs.
-- @column cpu_ns BIGINT             Summed CPU duration of the launch calls, nanoseconds.
-- @column gpu_ns BIGINT             Summed duration of the GPU ops the launches ran, nanoseconds.
-- @column span_ns BIGINT            Summed span (first GPU op start to last end) per launch, nanoseconds.
-- @column top_kernel VARCHAR        The GPU op name with the most time in the graph.
WITH per_launch AS (
    SELECT r.trace_id, r.id, r.api, r.ts_ns, r.dur_ns AS cpu_ns,
           TRY_CAST(json_extract(e.args, '$."graph id"') AS VARCHAR) AS graph_id,
           count(*) AS gpu_ops, sum(g.dur_ns) AS gpu_ns, max(g.end_ns) - min(g.ts_ns) AS span_ns,
           md5(string_agg(g.name, '|' ORDER BY g.ts_ns, g.id)) AS signature
    FROM runtime_calls r
    JOIN events e ON e.id = r.id
    JOIN gpu_ops g ON g.launch_id = r.id
    WHERE r.graph_launch
    GROUP BY r.trace_id, r.id, r.api, r.ts_ns, r.dur_ns, e.args
),
keyed AS (
    SELECT *, coalesce(graph_id, signature) AS key FROM per_launch
),
named AS (
    SELECT *, coalesce(graph_id, 'g' || dense_rank() OVER (PARTITION BY trace_id ORDER BY first_ts, key)) AS graph
    FROM (SELECT *, min(ts_ns) OVER (PARTITION BY trace_id, key) AS first_ts FROM keyed)
),
kernels AS (
    SELECT n.trace_id, n.key, g.name, sum(g.dur_ns) AS ns
    FROM named n JOIN gpu_ops g ON g.launch_id = n.id
    GROUP BY n.trace_id, n.key, g.name
),
agg AS (
    SELECT trace_id, key, any_value(api) AS api, any_value(graph) AS graph, count(*) AS launches,
           avg(gpu_ops) AS gpu_ops_per_launch, sum(cpu_ns)::BIGINT AS cpu_ns, sum(gpu_ns)::BIGINT AS gpu_ns,
           sum(span_ns)::BIGINT AS span_ns
    FROM named GROUP BY trace_id, key
)
SELECT t.trace, a.api, a.graph, a.launches, a.gpu_ops_per_launch,
       (SELECT count(*) FROM kernels k WHERE k.trace_id = a.trace_id AND k.key = a.key) AS kernels,
       a.cpu_ns, a.gpu_ns, a.span_ns,
       (SELECT arg_max(k.name, k.ns) FROM kernels k WHERE k.trace_id = a.trace_id AND k.key = a.key) AS top_kernel
FROM agg a JOIN traces t USING (trace_id)
ORDER BY t.trace, a.gpu_ns DESC, a.graph;
