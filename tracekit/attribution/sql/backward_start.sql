-- The backward calls' table, empty, and how many forward decisions there are to give the backward.
--
-- _bw_call exists after every build, filled only when backward nodes pair with decided forward ops
-- (attribution/backward_rows): attention_calls reads it. The last statement counts the decisions worth
-- giving (none in a trace without attention: nothing more to do).
--
-- @reads cpu_stage_decisions
-- @creates _bw_call      The backward calls: call_id, fwd_call_id (its forward call), trace_id, ts_ns, dur_ns, new (a call of its own, not a fused backward op's).
CREATE OR REPLACE TEMP TABLE _bw_call (call_id BIGINT, fwd_call_id BIGINT, trace_id INTEGER,
                                       ts_ns BIGINT, dur_ns BIGINT, new BOOLEAN);

SELECT count(*) FROM cpu_stage_decisions d WHERE {{include attribution/forward_decided d=d}};
