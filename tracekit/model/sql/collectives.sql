-- collectives: CPU ops and kernels that carry collective-communication args (columns: docs/schema.md).
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @reads slices
-- @creates collectives
CREATE {{table}} collectives AS
SELECT id, trace_id, kind, name, pid, tid, ts_ns, dur_ns, end_ns, {{columns collectives}}
FROM (SELECT *, {{args collectives}} AS a FROM slices
      WHERE kind IN ('cpu_op', 'kernel') AND contains(CAST(args AS VARCHAR), '"Collective name"'));
