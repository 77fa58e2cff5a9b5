-- python_functions: every Python frame (with_stack traces) and its parent frame (columns: docs/schema.md).
--
-- Python ids repeat in long recordings and merged files: the parent is the frame of that id whose time
-- contains the child's (the innermost, if several), so each frame keeps one row.
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @param args_spec TEXT       The json_transform spec of the typed args fields (schema.fields.spec).
-- @param args_columns COLUMNS  The typed args columns, read from the parsed args a (schema.fields).
-- @reads slices
-- @creates python_functions
CREATE {{table}} python_functions AS
WITH f AS (
    SELECT id, trace_id, name, pid, tid, ts_ns, dur_ns, end_ns, {{args_columns}}
    FROM (SELECT *, json_transform(args, {{args_spec}}) AS a FROM slices WHERE kind = 'python_function')
)
SELECT f.*, p.id AS parent_id
FROM f LEFT JOIN f p
  ON p.trace_id = f.trace_id AND p.pid = f.pid AND p.tid = f.tid AND p.python_id = f.python_parent_id
     AND p.id <> f.id AND p.ts_ns <= f.ts_ns AND f.end_ns <= p.end_ns
QUALIFY row_number() OVER (PARTITION BY f.id ORDER BY p.ts_ns DESC NULLS LAST, p.dur_ns, p.id) = 1;
