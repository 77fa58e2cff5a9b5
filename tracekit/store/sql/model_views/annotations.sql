-- cpu_slices of kind user_annotation (record_function ranges, ProfilerStep#N).
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
--
-- @param view KEYWORD(VIEW|TEMP VIEW)  TEMP VIEW for one connection's own model.
-- @creates annotations
CREATE OR REPLACE {{view}} annotations AS
SELECT * FROM cpu_slices WHERE kind = 'user_annotation';
