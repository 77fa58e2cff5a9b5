-- cpu_slices: every CPU slice with its place in its thread's stack (columns: docs/schema.md).
--
-- Read from events, not its view slices, though only slices join: DuckDB's estimate of every event makes
-- _nest (integers and the annotation lists) the join's hashed side; the estimate of the slices is far
-- below their number, and DuckDB then hashed the wide rows instead, which was slower.
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @param args_spec TEXT       The json_transform spec of the typed args fields (schema.fields.spec).
-- @param args_columns COLUMNS  The typed args columns, read from the parsed args a (schema.fields).
-- @reads events, _nest
-- @creates cpu_slices
CREATE {{table}} cpu_slices AS
SELECT s.id, s.trace_id, s.kind, s.name, s.pid, s.tid, s.ts_ns, s.dur_ns, s.end_ns,
       n.depth::INTEGER AS depth, n.parent_id, n.root_id, n.children::INTEGER AS children,
       greatest(s.dur_ns - n.child_ns, 0)::BIGINT AS self_ns,
       n.op_id, n.top_op_id, n.annotation_id, n.annotation_ids, n.annotations,
       s.external_id, s.correlation, {{args_columns}}
FROM (SELECT *, CASE WHEN kind IN ('cpu_op', 'user_annotation') THEN json_transform(args, {{args_spec}}) END AS a
      FROM events) s
JOIN _nest n USING (id);
