-- Why a GPU op has no launch in the trace, from whether a runtime call of its correlation is there (`linked`) and
-- its correlation id: NULL when linked; no_correlation when it carries no correlation id (0 or NULL); else
-- launched_before_trace. The one definition of a GPU op's orphan cause (gpu_ops and gpu_op_events).
--
-- @param before_trace TEXT    The cause of a GPU op launched before the trace began (schema.kinds.ORPHAN_CAUSES).
-- @param no_correlation TEXT  The cause of a GPU op with no correlation id (schema.kinds.ORPHAN_CAUSES).
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates orphan_cause
CREATE OR REPLACE {{macro}} orphan_cause(linked, correlation) AS (
    CASE WHEN linked THEN NULL WHEN coalesce(correlation, 0) = 0 THEN {{no_correlation}} ELSE {{before_trace}} END
);
