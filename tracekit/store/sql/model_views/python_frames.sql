-- The with_stack Python frames that name a file and a line ("model.py(42): forward"), parsed, each with the
-- library its file belongs to by rule_library_frames (NULL: user code). nn.Module scopes and built-in methods
-- are no rows. What call_sources and kernel_sources read the issuing user line from.
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
--
-- @param view KEYWORD(VIEW|TEMP VIEW)  TEMP VIEW for one connection's own model.
-- @creates python_frames
CREATE OR REPLACE {{view}} python_frames AS
WITH names AS (
    SELECT name, regexp_extract(name, '^(.*)\((\d+)\): (.*)$', 1) AS file,
           TRY_CAST(regexp_extract(name, '^(.*)\((\d+)\): (.*)$', 2) AS BIGINT) AS line,
           regexp_extract(name, '^(.*)\((\d+)\): (.*)$', 3) AS function
    FROM (SELECT DISTINCT name FROM python_functions)
    WHERE regexp_matches(name, '^(.*)\((\d+)\): ')
),
owned AS (
    SELECT n.*, (SELECT arg_min(r.library, r.rule_order) FROM rule_library_frames r
                 WHERE regexp_matches(n.file, r.pattern)) AS library
    FROM names n
)
SELECT f.id, f.trace_id, f.pid, f.tid, f.ts_ns, f.end_ns, o.file, o.line, o.function, o.library
FROM python_functions f JOIN owned o USING (name);
