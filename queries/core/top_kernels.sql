-- GPU ops by name: how often each ran and how long it took.
--
-- One row per trace and GPU op name (kernels, and memcpy/memset by their
-- names), heaviest first. share_pct is the op's share of the summed
-- duration of all counted GPU ops in its trace (a sum of durations, so
-- overlapping streams can add up to more than the busy time).
--
-- @param include_orphans BOOLEAN = false   Also count GPU ops launched before the trace began.
-- @param limit BIGINT = 50                  Rows per trace (0 for all).
-- @column trace VARCHAR      Trace label.
-- @column kind VARCHAR       kernel, memcpy or memset.
-- @column name VARCHAR       Kernel (or memcpy/memset) name as written.
-- @column count BIGINT       Number of GPU ops with this name.
-- @column total_ns BIGINT    Summed duration, nanoseconds.
-- @column avg_ns DOUBLE      Mean duration, nanoseconds.
-- @column min_ns BIGINT      Shortest duration, nanoseconds.
-- @column max_ns BIGINT      Longest duration, nanoseconds.
-- @column share_pct DOUBLE   100 * total_ns / summed duration of all counted GPU ops of the trace.
WITH per_name AS (
    SELECT trace_id, kind, name, count(*) AS count, sum(dur_ns)::BIGINT AS total_ns,
           avg(dur_ns) AS avg_ns, min(dur_ns) AS min_ns, max(dur_ns) AS max_ns
    FROM gpu_op_events
    WHERE $include_orphans OR NOT orphan
    GROUP BY trace_id, kind, name
),
ranked AS (
    SELECT *, 100.0 * total_ns / sum(total_ns) OVER (PARTITION BY trace_id) AS share_pct,
           row_number() OVER (PARTITION BY trace_id ORDER BY total_ns DESC, name) AS rank
    FROM per_name
)
SELECT t.trace, r.kind, r.name, r.count, r.total_ns, round(r.avg_ns, 3) AS avg_ns, r.min_ns, r.max_ns,
       round(r.share_pct, 3) AS share_pct
FROM ranked r JOIN traces t USING (trace_id)
WHERE $limit = 0 OR r.rank <= $limit
ORDER BY t.trace, r.total_ns DESC, r.name;
