-- runtime_calls: every runtime/driver call with the CPU op stack it was made in (columns: docs/schema.md).
--
-- A call's stack is its row of _nest (paired with _cpu by position: _nest is in _cpu's order, and a _nest
-- out of that order fails here rather than giving calls no stack). The ac2g flow starts are read once per
-- correlation and joined, not probed twice per call. The caller runs this with DuckDB's build-side
-- optimizer off: each join hashes the side written on its right, the narrower, where the planner's
-- estimates (the calls are underestimated) made it hash the wide calls.
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @param launch_kinds LIST                The kinds of runtime/driver call (schema.kinds.LAUNCH_KINDS).
-- @param args_spec TEXT       The json_transform spec of the typed args fields (schema.fields.spec).
-- @param args_columns COLUMNS  The typed args columns, read from the parsed args a (schema.fields).
-- @reads slices, flows, _cpu, _nest
-- @creates runtime_calls
-- @scratch _sflow        The ac2g flow starts: trace_id, correlation, pid, tid, ts_ns.
CREATE TEMP TABLE _sflow AS
SELECT DISTINCT trace_id, TRY_CAST(flow_id AS BIGINT) AS correlation, pid, tid, ts_ns
FROM flows WHERE kind = 'ac2g' AND ph = 's';

CREATE {{table}} runtime_calls AS
WITH c AS MATERIALIZED (
    SELECT n.id, n.op_id, n.top_op_id, n.annotation_id, n.annotations
    FROM _cpu POSITIONAL JOIN _nest n
    -- The rows pair by position: a _nest out of _cpu's order fails here, rather than giving calls no stack.
    WHERE _cpu.kind IN {{launch_kinds}}
      AND CASE WHEN _cpu.id = n.id THEN true ELSE error('internal: _nest is not in _cpu''s order') END
)
SELECT s.id, s.trace_id, s.kind, s.name AS api, s.pid, s.tid, s.ts_ns, s.dur_ns, s.end_ns,
       s.correlation, s.external_id, {{args_columns}},
       c.op_id AS cpu_op_id, op.name AS cpu_op_name, c.top_op_id, top.name AS top_op_name,
       c.annotation_id, c.annotations[-1] AS annotation_name, coalesce(c.annotations, []) AS annotations,
       s.name ILIKE '%graphlaunch%' AS graph_launch,
       -- NULL: no ac2g flow has this correlation; false: flows exist, none starts at this call.
       CASE WHEN fc.correlation IS NOT NULL THEN fm.correlation IS NOT NULL END AS flow_matches
FROM (SELECT *, json_transform(args, {{args_spec}}) AS a FROM slices WHERE kind IN {{launch_kinds}}) s
LEFT JOIN c USING (id)
-- Only the ops some call names: the names of every CPU slice would be hashed.
LEFT JOIN (SELECT id, name FROM _cpu WHERE id IN (SELECT op_id FROM c)) op ON op.id = c.op_id
LEFT JOIN (SELECT id, name FROM _cpu WHERE id IN (SELECT top_op_id FROM c)) top ON top.id = c.top_op_id
LEFT JOIN (SELECT DISTINCT trace_id, correlation FROM _sflow) fc
       ON fc.trace_id = s.trace_id AND fc.correlation = s.correlation
LEFT JOIN _sflow fm
       ON fm.trace_id = s.trace_id AND fm.correlation = s.correlation
      AND fm.pid = s.pid AND fm.tid = s.tid AND fm.ts_ns = s.ts_ns;

DROP TABLE _sflow;
