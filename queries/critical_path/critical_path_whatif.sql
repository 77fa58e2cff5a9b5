-- What if a stage, a kernel or an op were faster: the region's new length, every dependency kept.
--
-- Re-times critical_path_graph with the selected edges' time multiplied by
-- factor and takes the longest path again, so the answer is Amdahl's law
-- with the real graph: speeding up work that overlapped with the path
-- saves nothing, and a saving stops where another path becomes the longest.
-- stage selects the GPU ops of an attention stage (gpu_op_stages.stage, e.g.
-- fused_attention), kernel the GPU ops whose name matches a regular
-- expression, op a CPU op by a regular expression on its name: its own CPU
-- time and the GPU ops launched below it (the op's or the outermost op's
-- name matches). Given together they must all match; none selects nothing.
-- Only durations scale (cpu, kernel and communication edges), never gaps,
-- launch delays or waits; a queued GPU op still waits for its launch call
-- (the graph's launch_order edges), so work never moves before the CPU
-- issued it. new_span_ns is span_ns less the path's saving; naive_span_ns
-- is what subtracting the saved time would say, for comparison. With
-- cross_rank one row per job (trace is the job): the ranks re-timed together
-- through their collectives, span_ns the longest rank's.
--
-- @uses critical_path_graph
-- @param stage VARCHAR = ''      Attention stage whose GPU ops scale (gpu_op_stages.stage); empty: no condition.
-- @param kernel VARCHAR = ''     Regular expression on GPU op names that scale; empty: no condition.
-- @param op VARCHAR = ''         Regular expression on CPU op names whose time and GPU ops scale; empty: no condition.
-- @param factor DOUBLE = 0.5     Multiplier of the selected durations (0.5: twice as fast; 0: free).
-- @column trace VARCHAR          Trace label (with cross_rank: the job, "" without one).
-- @column rank INTEGER           The trace's rank (traces.rank; NULL when none was recorded or with cross_rank).
-- @column region VARCHAR         The region instance's range name.
-- @column instance BIGINT        The instance, from 0.
-- @column factor DOUBLE          The multiplier applied.
-- @column scaled_edges BIGINT    Durations (CPU spans and GPU ops) that were scaled.
-- @column scaled_ns BIGINT       Their summed duration before scaling, ns.
-- @column span_ns BIGINT         The region's span: its start to the later of its end and its last GPU op's end, ns.
-- @column path_ns BIGINT         Length of the critical path, ns.
-- @column new_path_ns BIGINT     Length of the longest path after scaling, ns.
-- @column saved_ns BIGINT        path_ns - new_path_ns: what the region would save, ns.
-- @column new_span_ns BIGINT     span_ns - saved_ns: the region's predicted length, ns.
-- @column naive_span_ns BIGINT   span_ns - scaled_ns * (1 - factor): what a subtraction would predict, ns.
-- @column speedup DOUBLE         span_ns / new_span_ns.
WITH marked AS (
    SELECT *,
           ($stage <> '' OR $kernel <> '' OR $op <> '')
           AND kind IN ('cpu', 'kernel', 'communication')
           AND ($stage = '' OR (gpu AND stage = $stage))
           AND ($kernel = '' OR (gpu AND regexp_matches(name, $kernel)))
           AND ($op = '' OR regexp_matches(coalesce(op_name, ''), $op) OR regexp_matches(coalesce(top_op_name, ''), $op))
               AS scaled
    FROM critical_path_graph
),
retimed AS (
    SELECT *, CASE WHEN scaled THEN round(time_ns * greatest($factor, 0))::BIGINT ELSE time_ns END AS new_ns
    FROM marked
),
solved AS (
    SELECT graph AS trace, CASE WHEN count(DISTINCT trace) = 1 THEN any_value(rank) END AS rank,
           any_value(region) AS region, any_value(instance) AS instance, max(span_ns) AS span_ns,
           count(*) FILTER (WHERE scaled) AS scaled_edges,
           coalesce(sum(time_ns) FILTER (WHERE scaled), 0)::BIGINT AS scaled_ns,
           list(time_ns ORDER BY edge) AS w, list(new_ns ORDER BY edge) AS w2,
           list(from_id * 2 + from_end::INT ORDER BY edge) AS src, list(to_id * 2 + to_end::INT ORDER BY edge) AS dst
    FROM retimed
    GROUP BY graph
),
lengths AS (
    SELECT *, coalesce(list_sum(list_select(w, critical_path_solve(src, dst, w))), 0)::BIGINT AS path_ns,
           coalesce(list_sum(list_select(w2, critical_path_solve(src, dst, w2))), 0)::BIGINT AS new_path_ns
    FROM solved
)
SELECT trace, rank, region, instance, $factor AS factor, scaled_edges, scaled_ns, span_ns, path_ns, new_path_ns,
       path_ns - new_path_ns AS saved_ns, span_ns - (path_ns - new_path_ns) AS new_span_ns,
       (span_ns - round(scaled_ns * (1 - $factor)))::BIGINT AS naive_span_ns,
       CASE WHEN span_ns - (path_ns - new_path_ns) > 0
            THEN round(span_ns / (span_ns - (path_ns - new_path_ns)), 4) END AS speedup
FROM lengths
ORDER BY trace
