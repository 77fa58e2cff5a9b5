-- Whether an attention call of this direction (attention_calls.direction) is one that per-call figures divide by:
-- a forward call, or one with no direction (a kernel-defined call). A backward call belongs to the forward call
-- autograd ran it for. The one definition of a call for per-call figures (call_counts, headline, diff --per-call).
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates counts_as_call
CREATE OR REPLACE {{macro}} counts_as_call(direction) AS (
    direction IS DISTINCT FROM 'backward'
);
