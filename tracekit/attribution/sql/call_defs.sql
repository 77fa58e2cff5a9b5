-- What defines each attention call: a label or op, a module scope, an eager pattern, or a backward call's forward call.
--
-- A call op widened to its block (attribution/eager_marks' block mark) spans the block, as a labelled call
-- does; an eager pattern spans its products (or its block) on the thread. A backward call of its own is
-- defined by its forward call, over its nodes' span on the CPU; a fused backward op's call holds its forward
-- call's other nodes too, and spans them all.
--
-- @reads _marked, cpu_slices, _eager_marks, _scope_marks, python_functions, _bw_call
-- @creates _call_defs    Per call defined on the CPU: id, trace_id, op, call_source (label, op, module, eager), ts_ns, dur_ns, impl.
CREATE OR REPLACE TEMP TABLE _call_defs AS
SELECT m.id, s.trace_id, s.name AS op, CASE s.kind WHEN 'user_annotation' THEN 'label' ELSE 'op' END
           AS call_source,
       -- A call op widened to its block (eager.find's 'block' mark) spans the block, as a labelled call does.
       coalesce(b.ts_ns, s.ts_ns) AS ts_ns, coalesce(b.end_ns - b.ts_ns, s.dur_ns) AS dur_ns, m.impl
FROM _marked m JOIN cpu_slices s USING (id)
LEFT JOIN _eager_marks b ON b.kind = 'block' AND b.id = m.id
WHERE m.is_call AND m.kind IN ('user_annotation', 'cpu_op')
UNION ALL
SELECT m.id, m.trace_id, f.name, 'module', m.ts_ns, m.end_ns - m.ts_ns, m.impl
FROM _scope_marks m JOIN python_functions f USING (id) WHERE m.is_call
UNION ALL
SELECT e.id, s.trace_id, e.op, 'eager', e.ts_ns, e.end_ns - e.ts_ns, e.impl
FROM _eager_marks e JOIN cpu_slices s USING (id) WHERE e.kind = 'eager';

-- A backward call of its own is defined by its forward call (its nodes' span on the CPU).
INSERT INTO _call_defs
SELECT b.call_id, b.trace_id, f.op, f.call_source, b.ts_ns, b.dur_ns, f.impl
FROM _bw_call b JOIN _call_defs f ON f.id = b.fwd_call_id WHERE b.new;

-- A fused backward op's call holds its forward call's other nodes too: it spans them all.
UPDATE _call_defs SET ts_ns = b.ts_ns, dur_ns = b.dur_ns
FROM _bw_call b WHERE b.call_id = _call_defs.id AND NOT b.new;
