-- The profiler step (ProfilerStep#N's N) whose range contains the CPU time at_ns in process `process` of trace
-- `trace`, on any thread of the process (a backward-thread launch belongs to the step it ran in); NULL outside
-- every step.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates step_of
CREATE OR REPLACE {{macro}} step_of(trace, process, at_ns) AS (
    SELECT max(p.step) FROM profiler_steps p
    WHERE p.trace_id = trace AND p.pid = process AND at_ns >= p.ts_ns AND at_ns < p.end_ns
);
