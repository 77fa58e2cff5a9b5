-- Union of intervals per group: busy_union(T) where T has columns grp, ts_ns, end_ns gives one row per grp with
-- busy_ns (covered time, overlaps counted once), first_ns and last_ns.
--
-- In (ts, end) order each interval's run_end is the furthest end so far: an island of overlapping intervals
-- starts where an interval begins after every earlier one has ended, and ends where the next begins after
-- run_end (touching intervals are one island). The covered time is the sum of the islands' ends less the sum
-- of their starts: one sort, no per-island grouping (cheaper than island ids by two windows and two
-- aggregations, with identical results).
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates busy_union
CREATE OR REPLACE {{macro}} busy_union(intervals) AS TABLE
SELECT grp,
       (sum(run_end) FILTER (WHERE next_ts IS NULL OR next_ts > run_end)
        - sum(ts_ns) FILTER (WHERE prev_end IS NULL OR ts_ns > prev_end))::BIGINT AS busy_ns,
       min(ts_ns) AS first_ns, max(run_end) AS last_ns
FROM (
    SELECT grp, ts_ns, run_end,
           lag(run_end) OVER (PARTITION BY grp ORDER BY ts_ns, end_ns) AS prev_end,
           lead(ts_ns) OVER (PARTITION BY grp ORDER BY ts_ns, end_ns) AS next_ts
    FROM (
        SELECT grp, ts_ns, end_ns,
               max(end_ns) OVER (PARTITION BY grp ORDER BY ts_ns, end_ns ROWS UNBOUNDED PRECEDING) AS run_end
        FROM query_table(intervals)
    )
)
GROUP BY grp;
