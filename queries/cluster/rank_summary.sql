-- One row per rank, the worst first: steps, GPU busy, communication and how much of it is exposed, attention, idle.
--
-- Ranks side by side, to spot the one that differs. The worst comes first: the
-- rank the others waited for longest (stragglers.wait_caused_ns), then the
-- longest mean step, then the most exposed communication, then the most GPU
-- idle, then the lowest rank. Steps are the ProfilerStep#N
-- ranges (profiler_steps; their CPU durations). GPU busy and idle come from
-- gpu_timeline (the union of GPU op intervals over the span of GPU ops).
-- Communication and its exposed part come from comm_overlap (HTA's comm/comp
-- overlap: communication kernels as is_collective_kernel says, merged per
-- device): exposed_comm_ns = comm_ns - overlapped_ns, the communication time
-- no computation kernel hid. attention_gpu_ns sums attention_calls' op-level
-- GPU time. Orphans are left out unless include_orphans, as in the queries used.
--
-- @uses gpu_timeline
-- @uses attention_calls
-- @uses comm_overlap
-- @uses stragglers
-- @column trace VARCHAR             Trace label.
-- @column rank INTEGER              The trace's rank (NULL: none recorded).
-- @column host VARCHAR              Host that recorded it (traces.host).
-- @column steps BIGINT              ProfilerStep#N ranges.
-- @column mean_step_ns DOUBLE       Mean step duration (CPU), ns.
-- @column max_step_ns BIGINT        Longest step, ns.
-- @column gpu_busy_ns BIGINT        Union of GPU op intervals, ns.
-- @column comm_ns BIGINT            Union of communication kernel intervals, ns.
-- @column exposed_comm_ns BIGINT    Communication time with no computation running, ns.
-- @column attention_gpu_ns BIGINT   Op-level GPU time of the attention calls, ns.
-- @column idle_pct DOUBLE           GPU idle share of the span of GPU ops, percent.
-- @column wait_caused_ns BIGINT     Time the other ranks waited for this one at matched collectives (stragglers), ns.
WITH steps AS (
    SELECT trace_id, count(*) AS steps, avg(dur_ns) AS mean_step_ns, max(dur_ns) AS max_step_ns
    FROM profiler_steps GROUP BY trace_id
),
attention AS (
    SELECT trace, sum(gpu_ns)::BIGINT AS attention_gpu_ns FROM attention_calls GROUP BY trace
)
SELECT t.trace, t.rank, t.host, coalesce(s.steps, 0) AS steps, s.mean_step_ns, s.max_step_ns,
       coalesce(tl.busy_ns, 0) AS gpu_busy_ns,
       coalesce(c.comm_ns, 0)::BIGINT AS comm_ns,
       coalesce(c.comm_ns - c.overlapped_ns, 0)::BIGINT AS exposed_comm_ns,
       coalesce(a.attention_gpu_ns, 0) AS attention_gpu_ns,
       round(100.0 * tl.idle_ns / nullif(tl.span_ns, 0), 3) AS idle_pct,
       coalesce(w.wait_caused_ns, 0)::BIGINT AS wait_caused_ns
FROM traces t
LEFT JOIN steps s USING (trace_id)
LEFT JOIN gpu_timeline tl ON tl.trace = t.trace
LEFT JOIN comm_overlap c ON c.trace = t.trace
LEFT JOIN attention a ON a.trace = t.trace
LEFT JOIN stragglers w ON w.trace = t.trace
ORDER BY wait_caused_ns DESC, mean_step_ns DESC NULLS LAST, exposed_comm_ns DESC, idle_pct DESC NULLS LAST,
         t.rank NULLS LAST, t.trace;
