-- Whether a GPU op with orphan cause `cause` was launched before the trace began (launched_before_trace): the GPU
-- ops every query leaves out unless asked to include orphans. An op with no correlation id was launched inside the
-- trace (its launch simply carries no id) and counts. The one definition of an orphan (gpu_ops.orphan and
-- gpu_op_events.orphan).
--
-- @param before_trace TEXT  The cause of a GPU op launched before the trace began (schema.kinds.ORPHAN_CAUSES).
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates is_orphan
CREATE OR REPLACE {{macro}} is_orphan(cause) AS (
    coalesce(cause = {{before_trace}}, false)
);
