-- GPU time per nn.Module class (or instance): calls, GPU ops, GPU time and self GPU time.
--
-- Module scopes are the python_function events named "nn.Module: <Class>_<n>"
-- (profiler with_stack / with_modules). A GPU op belongs to every module scope
-- whose thread made its launch within the scope's time; gpu_ns sums those GPU
-- ops' durations, self_gpu_ns leaves out what the module's child modules
-- launched (the nearest enclosing module is the parent). level=class sums the
-- instances of a class (a class nested in itself counts twice there);
-- level=instance gives one row per instance (Class_n). share_pct is of all GPU
-- op time launched in the trace. Launches outside any module and on other
-- threads (autograd's backward) are not in any row; orphans never are.
--
-- @empty No rows: the trace has no nn.Module scopes with GPU work under them (the recorded query counts its module_scopes); record with with_stack=True and with_modules=True next time.
-- @param level VARCHAR = class   class: one row per module class; instance: one row per instance (Class_n).
-- @column trace VARCHAR        Trace label.
-- @column module VARCHAR       Module class (the name after "nn.Module: " without the _n instance suffix).
-- @column instance VARCHAR     Instance name (Class_n); NULL at level=class.
-- @column calls BIGINT         Module scopes (forward calls).
-- @column gpu_ops BIGINT       GPU ops launched inside them.
-- @column gpu_ns BIGINT        Their summed duration, nanoseconds.
-- @column self_gpu_ns BIGINT   gpu_ns less what child modules launched, nanoseconds.
-- @column share_pct DOUBLE     100 * gpu_ns / summed duration of all launched GPU ops of the trace.
WITH launches AS (
    SELECT r.trace_id, r.pid, r.tid, r.ts_ns, r.id, count(*) AS gpu_ops, sum(g.dur_ns) AS gpu_ns
    FROM runtime_calls r JOIN gpu_ops g ON g.launch_id = r.id
    GROUP BY r.trace_id, r.pid, r.tid, r.ts_ns, r.id
),
calls AS (
    -- Running sums per thread: a module's launches are a contiguous run of them.
    SELECT *, row_number() OVER w AS pos, sum(gpu_ops) OVER w AS ops_upto, sum(gpu_ns) OVER w AS ns_upto
    FROM launches
    WINDOW w AS (PARTITION BY trace_id, pid, tid ORDER BY ts_ns, id ROWS UNBOUNDED PRECEDING)
),
modules AS (
    SELECT id, trace_id, pid, tid, ts_ns, end_ns, dur_ns, substr(name, 12) AS instance,
           regexp_replace(substr(name, 12), '_[0-9]+$', '') AS module
    FROM python_functions
    WHERE starts_with(name, 'nn.Module: ')
),
first_call AS (
    SELECT m.id, c.pos, c.ops_upto - c.gpu_ops AS ops_before, c.ns_upto - c.gpu_ns AS ns_before
    FROM modules m ASOF JOIN calls c
      ON c.trace_id = m.trace_id AND c.pid = m.pid AND c.tid = m.tid AND c.ts_ns >= m.ts_ns
),
last_call AS (
    SELECT m.id, c.pos, c.ops_upto, c.ns_upto
    FROM modules m ASOF JOIN calls c
      ON c.trace_id = m.trace_id AND c.pid = m.pid AND c.tid = m.tid AND c.ts_ns <= m.end_ns
),
totals AS (
    SELECT m.*,
           CASE WHEN f.pos <= l.pos THEN l.ops_upto - f.ops_before ELSE 0 END AS gpu_ops,
           CASE WHEN f.pos <= l.pos THEN l.ns_upto - f.ns_before ELSE 0 END AS gpu_ns
    FROM modules m LEFT JOIN first_call f USING (id) LEFT JOIN last_call l USING (id)
),
edges AS (
    -- Module scopes nest properly per thread: +1 at a start, -1 at an end (ends first at equal times).
    SELECT id, trace_id, pid, tid, ts_ns AS at_ns, 1 AS delta, -dur_ns AS ord FROM modules
    UNION ALL
    SELECT id, trace_id, pid, tid, end_ns, -1, 0 FROM modules
),
depths AS (
    SELECT id, trace_id, pid, tid, at_ns AS ts_ns,
           sum(delta) OVER (PARTITION BY trace_id, pid, tid ORDER BY at_ns, delta, ord, id ROWS UNBOUNDED PRECEDING)
               AS depth
    FROM edges
    QUALIFY delta = 1
),
parents AS (
    SELECT d.id, p.id AS parent_id
    FROM depths d ASOF JOIN depths p
      ON p.trace_id = d.trace_id AND p.pid = d.pid AND p.tid = d.tid AND p.depth = d.depth - 1 AND p.ts_ns <= d.ts_ns
),
selfed AS (
    SELECT t.*, t.gpu_ns - coalesce((SELECT sum(c.gpu_ns) FROM parents p JOIN totals c ON c.id = p.id
                                     WHERE p.parent_id = t.id), 0) AS self_gpu_ns
    FROM totals t
),
trace_total AS (
    SELECT trace_id, sum(gpu_ns) AS ns FROM launches GROUP BY trace_id
),
rows AS (
    SELECT trace_id, module, CASE WHEN $level = 'instance' THEN instance END AS instance, count(*) AS calls,
           sum(gpu_ops)::BIGINT AS gpu_ops, sum(gpu_ns)::BIGINT AS gpu_ns, sum(self_gpu_ns)::BIGINT AS self_gpu_ns
    FROM selfed
    GROUP BY trace_id, module, CASE WHEN $level = 'instance' THEN instance END
)
SELECT t.trace, r.module, r.instance, r.calls, r.gpu_ops, r.gpu_ns, r.self_gpu_ns,
       CASE WHEN tt.ns > 0 THEN 100.0 * r.gpu_ns / tt.ns END AS share_pct
FROM rows r JOIN traces t USING (trace_id) LEFT JOIN trace_total tt USING (trace_id)
ORDER BY t.trace, r.gpu_ns DESC, r.module, r.instance;
