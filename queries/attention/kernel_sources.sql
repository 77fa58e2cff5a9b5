-- The lines of user code that launched each of the heaviest GPU op names (with_stack traces).
--
-- For the limit heaviest GPU op names of each trace (as top_kernels ranks them),
-- one row per name and user line that launched it: the innermost Python frame
-- (python_frames with no library: not torch, transformers, a serving engine, ...;
-- tracekit/rules/library_frames.csv) of the launching thread that holds the
-- launch (the runtime call). source is "file:line function"; NULL when the
-- trace recorded no Python frames (stacks false), when every frame around the
-- launch is a library's, or for a GPU op with no launch in the trace. A name
-- launched from several lines has a row per line, the heaviest first. By
-- default orphan GPU ops are left out.
--
-- @param include_orphans BOOLEAN = false   Also count GPU ops launched before the trace began.
-- @param limit BIGINT = 20                  GPU op names per trace (0 for all).
-- @column trace VARCHAR      Trace label.
-- @column name VARCHAR       Kernel (or memcpy/memset) name as written.
-- @column source VARCHAR     "file:line function" of the innermost user frame around the launch (NULL: none).
-- @column file VARCHAR       The frame's file as recorded.
-- @column line BIGINT        Its line.
-- @column function VARCHAR   Its function.
-- @column count BIGINT       GPU ops of this name launched from this line.
-- @column total_ns BIGINT    Their summed duration, nanoseconds.
-- @column name_rank BIGINT   The name's rank in its trace by GPU time, from 1 (top_kernels' order).
-- @column stacks BOOLEAN     The trace recorded Python frames with file and line (with_stack).
WITH ops AS MATERIALIZED (
    SELECT g.id, g.trace_id, g.name, g.dur_ns, g.launch_id
    FROM gpu_ops g
    WHERE $include_orphans OR NOT g.orphan
),
ranked AS (
    SELECT trace_id, name, row_number() OVER (PARTITION BY trace_id ORDER BY sum(dur_ns) DESC, name) AS name_rank
    FROM ops
    GROUP BY trace_id, name
),
top_ops AS MATERIALIZED (
    SELECT o.*, k.name_rank, r.pid, r.tid, r.ts_ns, r.end_ns
    FROM ops o
    JOIN ranked k USING (trace_id, name)
    LEFT JOIN runtime_calls r ON r.id = o.launch_id
    WHERE $limit = 0 OR k.name_rank <= $limit
),
frames AS MATERIALIZED (
    SELECT id, trace_id, pid, tid, ts_ns, end_ns FROM python_frames WHERE library IS NULL
),
inner_frame AS (
    SELECT o.id, arg_max(f.id, [f.ts_ns, -f.end_ns]) AS frame_id  -- the latest start; of two, the shorter
    FROM top_ops o
    JOIN frames f ON f.trace_id = o.trace_id AND f.pid = o.pid AND f.tid = o.tid
                 AND f.ts_ns <= o.ts_ns AND f.end_ns >= o.end_ns
    GROUP BY o.id
),
stacked AS (
    SELECT DISTINCT trace_id, true AS stacks FROM python_frames
)
SELECT t.trace, o.name, f.file || ':' || f.line || ' ' || f.function AS source, f.file, f.line, f.function,
       count(*) AS count, sum(o.dur_ns)::BIGINT AS total_ns, o.name_rank, coalesce(any_value(st.stacks), false) AS stacks
FROM top_ops o
LEFT JOIN inner_frame i ON i.id = o.id
LEFT JOIN python_frames f ON f.id = i.frame_id
LEFT JOIN stacked st ON st.trace_id = o.trace_id
JOIN traces t ON t.trace_id = o.trace_id
GROUP BY t.trace, o.name, f.file, f.line, f.function, o.name_rank
ORDER BY t.trace, o.name_rank, total_ns DESC, source NULLS LAST;
