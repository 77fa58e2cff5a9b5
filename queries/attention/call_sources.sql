-- The line of user code that issued each attention call (with_stack traces).
--
-- One row per attention call. With with_stack=True the profiler records the
-- Python frames (python_functions, "file.py(42): forward"); a call's source is
-- the innermost frame of its thread that holds the call's range, op or module
-- scope (for a call found by kernel name, the launch) and whose file is no
-- library's: rule_library_frames (tracekit/rules/library_frames.csv: torch,
-- transformers, the serving engines, ...; the python_frames view) lists the library files, so the line
-- is the user's own, e.g. the model code that called the transformers model.
-- source is "file:line function". stacks says whether the trace recorded Python
-- frames at all: without them (stacks false) source is NULL, and it is NULL too
-- when every frame around the call is a library's.
--
-- @column trace VARCHAR      Trace label.
-- @column call_id BIGINT     Attention call (attention_calls.call_id).
-- @column impl VARCHAR       The call's implementation.
-- @column op VARCHAR         The label, module scope, op or kernel that defines the call.
-- @column source VARCHAR     "file:line function" of the innermost user frame around the call (NULL: none).
-- @column file VARCHAR       The frame's file as recorded.
-- @column line BIGINT        Its line.
-- @column function VARCHAR   Its function.
-- @column frame_id BIGINT    The frame (python_functions.id).
-- @column stacks BOOLEAN     The trace recorded Python frames with file and line (with_stack).
WITH frames AS MATERIALIZED (
    SELECT id, trace_id, pid, tid, ts_ns, end_ns, file, line, function FROM python_frames WHERE library IS NULL
),
anchors AS MATERIALIZED (
    SELECT c.trace_id, c.call_id, c.impl, c.op, c.ts_ns AS call_ts,
           coalesce(s.pid, p.pid, r.pid) AS pid, coalesce(s.tid, p.tid, r.tid) AS tid,
           coalesce(s.ts_ns, p.ts_ns, r.ts_ns) AS ts_ns, coalesce(s.end_ns, p.end_ns, r.end_ns) AS end_ns
    FROM attention_calls c
    LEFT JOIN cpu_slices s ON s.id = c.call_id
    LEFT JOIN python_functions p ON p.id = c.call_id
    LEFT JOIN gpu_ops g ON g.id = c.call_id
    LEFT JOIN runtime_calls r ON r.id = g.launch_id
),
inner_frame AS (
    SELECT a.call_id, arg_max(f.id, [f.ts_ns, -f.end_ns]) AS frame_id  -- the latest start; of two, the shorter
    FROM anchors a
    JOIN frames f ON f.trace_id = a.trace_id AND f.pid = a.pid AND f.tid = a.tid
                 AND f.ts_ns <= a.ts_ns AND f.end_ns >= a.end_ns AND f.id <> a.call_id
    GROUP BY a.call_id
),
stacked AS (
    SELECT DISTINCT trace_id, true AS stacks FROM python_frames
)
SELECT t.trace, a.call_id, a.impl, a.op, f.file || ':' || f.line || ' ' || f.function AS source, f.file, f.line,
       f.function, f.id AS frame_id, coalesce(st.stacks, false) AS stacks
FROM anchors a
LEFT JOIN inner_frame i USING (call_id)
LEFT JOIN frames f ON f.id = i.frame_id
LEFT JOIN stacked st ON st.trace_id = a.trace_id
JOIN traces t ON t.trace_id = a.trace_id
ORDER BY t.trace, a.call_ts, a.call_id;
