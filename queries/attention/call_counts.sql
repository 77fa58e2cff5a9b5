-- How many attention calls each trace holds, and how many per-call figures divide by.
--
-- The one definition of "a call" for per-call figures (the report's headline,
-- diff --per-call, the report's stage comparison): a forward call
-- (the counts_as_call macro). In a training trace a backward call belongs to
-- the forward call autograd ran it for, so a training step's attention is
-- per forward call, its backward included; backward_calls counts them apart.
-- A call defined by a kernel name alone (no direction) counts as a call.
--
-- @uses attention_calls
-- @column trace VARCHAR          Trace label.
-- @column calls BIGINT           Calls per-call figures divide by: forward calls, and calls with no direction.
-- @column backward_calls BIGINT  Backward calls (their time belongs to their forward calls).
-- @column all_calls BIGINT       Every row of attention_calls.
SELECT trace, count(*) FILTER (WHERE counts_as_call(direction)) AS calls,
       count(*) FILTER (WHERE NOT counts_as_call(direction)) AS backward_calls,
       count(*) AS all_calls
FROM attention_calls
GROUP BY trace
ORDER BY trace;
