-- The profiler steps: one row per ProfilerStep#N range (the user_annotation prof.step() records). The one
-- definition of a step that queries share (see the step_of macro).
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
--
-- @param view KEYWORD(VIEW|TEMP VIEW)  TEMP VIEW for one connection's own model.
-- @creates profiler_steps
CREATE OR REPLACE {{view}} profiler_steps AS
SELECT id, trace_id, pid, tid, name AS step_name,
       TRY_CAST(regexp_extract(name, '^ProfilerStep#([0-9]+)$', 1) AS BIGINT) AS step, ts_ns, end_ns, dur_ns
FROM cpu_slices WHERE kind = 'user_annotation' AND name LIKE 'ProfilerStep#%';
