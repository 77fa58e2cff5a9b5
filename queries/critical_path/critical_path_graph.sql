-- The dependency graph of one region instance per trace: every edge the critical path is the longest path of.
--
-- HTA's critical-path graph (docs/critical_path.md), built from the linked
-- model. The region is one instance of a record_function range: region is its
-- name or the name before '#' (ProfilerStep, the default, matches
-- ProfilerStep#N), instance counts those ranges of a trace from 0 by start
-- (as HTA's instance_id), and an empty region is the whole trace. Nodes are
-- the start and end of every CPU op, runtime and driver call that starts in
-- the region with a positive duration, and of every GPU op such a call
-- launched. Edges: cpu (consecutive starts and ends of the nested calls of
-- one thread, weight the time between them; 0 into the end of a blocking
-- call: cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize,
-- cudaEventQuery, cudaMemcpy, cudaMemcpyAsync and their HIP twins);
-- cpu_gap (the end of a top-level call to the start of the next on its thread:
-- host time outside any op, counted when host_gaps, 0 as in HTA otherwise);
-- kernel or communication (a GPU op's duration); launch_delay (launch call's
-- start to the GPU op's start, when the stream was idle at the launch and
-- nothing else was queued when the op started); kernel_gap (the previous op
-- on the stream's end to this one's start, otherwise); sync (weight 0: a GPU
-- op's end to the end of the cudaDeviceSynchronize, cudaStreamSynchronize or
-- cudaEventSynchronize that waited for it, and an event-recorded op's end to
-- the start of the op a cudaStreamWaitEvent made wait); launch_order (weight
-- 0: a launch call's start to a queued GPU op's start, so a what-if never
-- starts an op before its launch; left out of critical_path, as HTA leaves
-- them out by default). Each edge is attributed to one event as HTA does
-- (a nested call's span to the call, the time between two siblings to their
-- parent, a kernel_gap to the op before it, a launch_delay to the GPU op)
-- and carries that event's attention stage and call. With cross_rank, the
-- traces of a job (traces.job) form one graph (graph is the job): a collective
-- instance seen on two ranks or more (matched as matched_collectives does)
-- ends when its last rank arrives, so each earlier rank's kernel weighs only
-- the last rank's duration (its transfer, not its wait) and gets a collective
-- edge from the last rank's kernel start (weight that duration): the wait is
-- on the path through the late rank's work.
--
-- @param region VARCHAR = ProfilerStep   record_function range name (or the name before '#'); empty: the whole trace.
-- @param instance BIGINT = 0             Which range of that name, from 0 in order of start, per trace.
-- @param host_gaps BOOLEAN = true        Count host time between top-level calls of a thread (HTA: false).
-- @param cross_rank BOOLEAN = false      Join the ranks of a job into one graph through their collectives.
-- @column trace VARCHAR          Trace label.
-- @column rank INTEGER           The trace's rank (traces.rank; NULL when none was recorded).
-- @column region VARCHAR         The region instance's range name, e.g. ProfilerStep#4 ("(trace)" for the whole trace).
-- @column instance BIGINT        The instance, from 0.
-- @column graph VARCHAR          The graph the edge belongs to: the trace's label, or with cross_rank its job ("" without one).
-- @column edge BIGINT            Edge number within its graph, from 1 (the order critical_path_solve reads).
-- @column kind VARCHAR           cpu, cpu_gap, kernel, communication, launch_delay, kernel_gap, sync, collective or launch_order.
-- @column from_id BIGINT         Event at the edge's start (events.id).
-- @column from_end BOOLEAN       The edge starts at that event's end (false: at its start).
-- @column to_id BIGINT           Event at the edge's end (events.id).
-- @column to_end BOOLEAN         The edge ends at that event's end.
-- @column time_ns BIGINT         Weight: the time the edge stands for, ns (0 for sync, launch_order, blocking waits).
-- @column event_id BIGINT        The event the edge is attributed to (NULL for cpu_gap, sync and launch_order; a collective edge's: the last rank's kernel).
-- @column name VARCHAR           That event's name.
-- @column stage VARCHAR          Its attention stage (cpu_stages, gpu_op_stages; other when none).
-- @column call_id BIGINT         Its attention call (attention_calls.call_id), NULL outside one.
-- @column gpu BOOLEAN            The edge is a GPU op's duration (kind kernel or communication).
-- @column op_name VARCHAR        The innermost CPU op of the event (itself for an op; a GPU op's launching op).
-- @column top_op_name VARCHAR    The outermost CPU op of the event (itself at top level).
-- @column region_ns BIGINT       The region instance's duration on the CPU, ns.
-- @column span_ns BIGINT         Region start to the later of its end and the end of the last GPU op it launched, ns.
WITH regions AS (
    SELECT trace_id, id, name, ts_ns, end_ns,
           row_number() OVER (PARTITION BY trace_id ORDER BY ts_ns, id) - 1 AS instance
    FROM cpu_slices
    WHERE $region <> '' AND kind = 'user_annotation' AND (name = $region OR starts_with(name, $region || '#'))
    UNION ALL
    SELECT trace_id, NULL, '(trace)', first_ts_ns, last_end_ns, 0 FROM traces WHERE $region = ''
),
win AS (
    SELECT trace_id, name AS region, instance, ts_ns AS win_start, end_ns AS win_end FROM regions
    WHERE instance = $instance
),
cpu AS (
    SELECT c.id, c.trace_id, c.pid, c.tid, c.kind, c.name, c.ts_ns, c.end_ns, c.depth, c.op_id, c.top_op_id,
           c.kind <> 'cpu_op' AND regexp_matches(c.name,
               '^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|EventQuery|Memcpy|MemcpyAsync)$')
               AS blocking
    FROM win w
    JOIN cpu_slices c ON c.trace_id = w.trace_id AND c.ts_ns >= w.win_start AND c.ts_ns <= w.win_end
    WHERE c.kind IN ('cpu_op', 'runtime', 'driver') AND c.dur_ns > 0
),
-- Each thread's starts and ends in the order a depth-first walk of its call stacks meets them.
bounds AS (
    SELECT *, sum(CASE WHEN is_end THEN -1 ELSE 1 END) OVER
                  (PARTITION BY trace_id, pid, tid ORDER BY t, is_end DESC, o, id
                   ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS open_after,
           lead(id) OVER thread AS next_id, lead(is_end) OVER thread AS next_end, lead(t) OVER thread AS next_t,
           lead(blocking) OVER thread AS next_blocking
    FROM (
        SELECT id, trace_id, pid, tid, op_id, blocking, false AS is_end, ts_ns AS t, depth AS o FROM cpu
        UNION ALL
        SELECT id, trace_id, pid, tid, op_id, blocking, true, end_ns, -depth FROM cpu
    )
    WINDOW thread AS (PARTITION BY trace_id, pid, tid ORDER BY t, is_end DESC, o, id)
),
cpu_edges AS (
    SELECT trace_id,
           CASE WHEN is_end AND open_after = 0 THEN 'cpu_gap' ELSE 'cpu' END AS kind,
           id AS from_id, is_end AS from_end, next_id AS to_id, next_end AS to_end,
           CASE WHEN is_end AND open_after = 0 THEN CASE WHEN $host_gaps THEN greatest(next_t - t, 0) ELSE 0 END
                WHEN next_end AND next_blocking THEN 0
                ELSE greatest(next_t - t, 0) END AS time_ns,
           CASE WHEN is_end AND open_after = 0 THEN NULL
                WHEN NOT is_end THEN id
                WHEN next_end THEN next_id
                ELSE coalesce(op_id, id) END AS event_id
    FROM bounds
    WHERE next_id IS NOT NULL
),
gpu AS (
    SELECT g.id, g.trace_id, g.device, g.stream, g.ts_ns, g.end_ns, g.dur_ns, g.launch_id, c.ts_ns AS launch_ts,
           c.pid AS launch_pid, c.tid AS launch_tid, g.name, g.kind,
           lag(g.id) OVER s AS prev_id, lag(g.end_ns) OVER s AS prev_end
    FROM cpu c JOIN gpu_ops g ON g.launch_id = c.id
    WINDOW s AS (PARTITION BY g.trace_id, g.device, g.stream ORDER BY g.ts_ns, g.id)
),
-- Whether another op was queued on the stream when each op started (HTA's queue length 0): the next op on the
-- stream, in the whole trace, was launched before this one started.
queued AS (
    SELECT id, lead(launch_ts_ns) OVER (PARTITION BY trace_id, device, stream ORDER BY ts_ns, id) AS next_launch
    FROM gpu_ops g
    WHERE launch_id IS NOT NULL AND trace_id IN (SELECT trace_id FROM win)
),
syncs AS (
    SELECT s.trace_id, s.ts_ns, s.end_ns, s.args->>'cuda_sync_kind' AS sync_kind,
           TRY_CAST(s.args->>'device' AS INTEGER) AS device, TRY_CAST(s.args->>'stream' AS BIGINT) AS stream,
           TRY_CAST(s.args->>'wait_on_stream' AS BIGINT) AS wait_on_stream,
           TRY_CAST(s.args->>'wait_on_cuda_event_record_corr_id' AS BIGINT) AS record_corr,
           r.id AS call_id, r.pid AS call_pid, r.tid AS call_tid, r.ts_ns AS call_ts
    FROM slices s
    JOIN runtime_calls rc ON rc.trace_id = s.trace_id AND rc.correlation = s.correlation
    JOIN cpu r ON r.id = rc.id
    WHERE s.kind = 'sync' AND s.trace_id IN (SELECT trace_id FROM win)
),
-- The op an event waited for: the last op launched on the recorded stream before its cudaEventRecord.
recorded AS (
    SELECT y.*, (SELECT g.id FROM gpu g JOIN runtime_calls er ON er.trace_id = y.trace_id AND er.correlation = y.record_corr
                 WHERE g.trace_id = y.trace_id AND g.device = y.device AND g.stream = y.wait_on_stream
                   AND g.launch_ts < er.ts_ns
                 ORDER BY g.launch_ts DESC, g.id DESC LIMIT 1) AS src_id
    FROM syncs y
    WHERE y.sync_kind IN ('Event Sync', 'Stream Wait Event') AND y.record_corr > 0
),
-- cudaStreamWaitEvent: the op it makes wait is the next one its thread launched on the waiting stream.
waits AS (
    SELECT r.src_id, (SELECT g.id FROM gpu g
                      WHERE g.trace_id = r.trace_id AND g.launch_pid = r.call_pid AND g.launch_tid = r.call_tid
                        AND g.stream = r.stream AND g.launch_ts > r.call_ts
                      ORDER BY g.launch_ts, g.id LIMIT 1) AS dst_id
    FROM recorded r
    WHERE r.sync_kind = 'Stream Wait Event' AND r.src_id IS NOT NULL
),
gpu_deps AS (
    SELECT g.*, w.src_id AS wait_src, src.end_ns AS wait_end, q.next_launch
    FROM gpu g
    LEFT JOIN (SELECT dst_id, arg_max(src_id, src_id) AS src_id FROM waits GROUP BY dst_id) w ON w.dst_id = g.id
    LEFT JOIN gpu src ON src.id = w.src_id
    LEFT JOIN queued q ON q.id = g.id
),
-- The collective instances seen on two ranks or more of a job, and each one's last arrival (the shortest kernel).
coll AS (
    SELECT *, arg_min(id, (dur_ns, -trace_id)) OVER i AS last_id, min(dur_ns) OVER i AS shortest_ns,
           count(*) OVER i AS ranks
    FROM (
        SELECT g.id, g.trace_id, g.dur_ns, t.job, k.pg, k.collective, k.instance, k.part
        FROM gpu g JOIN collective_kernels k ON k.id = g.id JOIN traces t ON t.trace_id = g.trace_id
        WHERE $cross_rank AND NOT k.p2p
    )
    WINDOW i AS (PARTITION BY job, pg, collective, instance, part)
    QUALIFY count(*) OVER i >= 2
),
gpu_edges AS (
    SELECT g.trace_id, CASE WHEN is_collective_kernel(g.name) THEN 'communication' ELSE 'kernel' END AS kind,
           g.id AS from_id, false AS from_end, g.id AS to_id, true AS to_end,
           coalesce(c.shortest_ns, g.dur_ns) AS time_ns, g.id AS event_id
    FROM gpu g LEFT JOIN coll c ON c.id = g.id
    UNION ALL  -- an earlier rank's collective ends when the last rank's has run
    SELECT l.trace_id, 'collective', c.last_id, false, c.id, true, c.shortest_ns, c.last_id
    FROM coll c JOIN gpu l ON l.id = c.last_id
    WHERE c.id <> c.last_id
    UNION ALL
    SELECT trace_id, 'sync', wait_src, true, id, false, 0, NULL FROM gpu_deps WHERE wait_src IS NOT NULL
    UNION ALL
    SELECT trace_id,
           CASE WHEN launch_edge THEN 'launch_delay' WHEN gap_edge THEN 'kernel_gap' ELSE 'launch_order' END,
           CASE WHEN gap_edge AND NOT launch_edge THEN prev_id ELSE launch_id END,
           gap_edge AND NOT launch_edge, id, false,
           CASE WHEN launch_edge THEN greatest(ts_ns - launch_ts, 0)
                WHEN gap_edge THEN greatest(ts_ns - prev_end, 0) ELSE 0 END,
           CASE WHEN launch_edge THEN id WHEN gap_edge THEN prev_id END
    FROM (
        SELECT *,
               (prev_end IS NULL OR prev_end < launch_ts) AND (next_launch IS NULL OR next_launch > ts_ns)
                   AND (wait_end IS NULL OR wait_end < launch_ts) AS launch_edge,
               prev_id IS NOT NULL AND (wait_end IS NULL OR wait_end < prev_end) AS gap_edge
        FROM gpu_deps
    )
    UNION ALL  -- a queued op also waits for its launch (kept out of the path: weight 0)
    SELECT trace_id, 'launch_order', launch_id, false, id, false, 0, NULL
    FROM gpu_deps
    WHERE NOT ((prev_end IS NULL OR prev_end < launch_ts) AND (next_launch IS NULL OR next_launch > ts_ns)
               AND (wait_end IS NULL OR wait_end < launch_ts))
      AND prev_id IS NOT NULL AND (wait_end IS NULL OR wait_end < prev_end)
),
-- A GPU op's end to the end of the synchronize call that waited for it.
sync_edges AS (
    SELECT y.trace_id, 'sync' AS kind, g.id AS from_id, true AS from_end, y.call_id AS to_id, true AS to_end,
           0 AS time_ns, NULL::BIGINT AS event_id
    FROM syncs y
    JOIN (SELECT y2.call_id, g2.device, g2.stream, max(g2.ts_ns) AS last_ts
          FROM syncs y2 JOIN gpu g2 ON g2.trace_id = y2.trace_id AND g2.ts_ns <= y2.end_ns
                                    AND (y2.device IS NULL OR y2.device < 0 OR g2.device = y2.device)
                                    AND (y2.sync_kind = 'Context Sync' OR g2.stream = y2.stream)
          WHERE y2.sync_kind IN ('Context Sync', 'Stream Sync')
          GROUP BY y2.call_id, g2.device, g2.stream) l ON l.call_id = y.call_id
    JOIN gpu g ON g.trace_id = y.trace_id AND g.device = l.device AND g.stream = l.stream AND g.ts_ns = l.last_ts
    WHERE y.sync_kind IN ('Context Sync', 'Stream Sync')
    UNION ALL
    SELECT trace_id, 'sync', src_id, true, call_id, true, 0, NULL FROM recorded
    WHERE sync_kind = 'Event Sync' AND src_id IS NOT NULL
),
edges AS (
    SELECT * FROM cpu_edges UNION ALL SELECT * FROM gpu_edges UNION ALL SELECT * FROM sync_edges
),
spans AS (
    SELECT w.trace_id, greatest(w.win_end, coalesce(max(g.end_ns), w.win_end)) - w.win_start AS span_ns
    FROM win w LEFT JOIN gpu g ON g.trace_id = w.trace_id
    GROUP BY w.trace_id, w.win_start, w.win_end
)
SELECT t.trace, t.rank, w.region, w.instance,
       CASE WHEN $cross_rank THEN coalesce(t.job, '') ELSE t.trace END AS graph,
       row_number() OVER (PARTITION BY CASE WHEN $cross_rank THEN coalesce(t.job, '') ELSE t.trace END
                          ORDER BY e.from_id, e.from_end, e.to_id, e.to_end, e.kind, e.time_ns) AS edge,
       e.kind, e.from_id, e.from_end, e.to_id, e.to_end, e.time_ns::BIGINT AS time_ns, e.event_id,
       coalesce(c.name, g.name) AS name,
       coalesce(gs.stage, cs.stage, 'other') AS stage, coalesce(gs.call_id, cs.call_id) AS call_id,
       e.kind IN ('kernel', 'communication') AS gpu,
       CASE WHEN c.kind = 'cpu_op' THEN c.name ELSE coalesce(g.cpu_op_name, op.name) END AS op_name,
       coalesce(g.top_op_name, top.name, CASE WHEN c.kind = 'cpu_op' THEN c.name END) AS top_op_name,
       w.win_end - w.win_start AS region_ns, sp.span_ns
FROM edges e
JOIN win w ON w.trace_id = e.trace_id
JOIN traces t ON t.trace_id = e.trace_id
JOIN spans sp ON sp.trace_id = e.trace_id
LEFT JOIN cpu c ON c.id = e.event_id
LEFT JOIN cpu_slices op ON op.id = c.op_id
LEFT JOIN cpu_slices top ON top.id = c.top_op_id
LEFT JOIN gpu_ops g ON g.id = e.event_id AND c.id IS NULL
LEFT JOIN cpu_stages cs ON cs.id = c.id
LEFT JOIN gpu_op_stages gs ON gs.id = g.id
ORDER BY graph, edge
