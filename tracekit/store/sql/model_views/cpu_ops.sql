-- cpu_slices of kind cpu_op (aten:: and other operators).
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
--
-- @param view KEYWORD(VIEW|TEMP VIEW)  TEMP VIEW for one connection's own model.
-- @creates cpu_ops
CREATE OR REPLACE {{view}} cpu_ops AS
SELECT * FROM cpu_slices WHERE kind = 'cpu_op';
