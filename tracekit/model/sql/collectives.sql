-- collectives: CPU ops and kernels that carry collective-communication args (columns: docs/schema.md).
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @param args_spec TEXT       The json_transform spec of the typed args fields (schema.fields.spec).
-- @param args_columns COLUMNS  The typed args columns, read from the parsed args a (schema.fields).
-- @reads slices
-- @creates collectives
CREATE {{table}} collectives AS
SELECT id, trace_id, kind, name, pid, tid, ts_ns, dur_ns, end_ns, {{args_columns}}
FROM (SELECT *, json_transform(args, {{args_spec}}) AS a FROM slices
      WHERE kind IN ('cpu_op', 'kernel') AND contains(CAST(args AS VARCHAR), '"Collective name"'));
