-- Queue length per stream: GPU ops launched but not finished, summarized (HTA's queue length summary).
--
-- Per trace, device and stream, the series steps +1 when a runtime call
-- enqueues a GPU op (at the call's start) and -1 when that op finishes on the
-- GPU (completions first at equal times); only GPU ops whose launch is in the
-- trace count. The summary statistics are over the series' values after each
-- step, as HTA's describe() gives them; mean_weighted weights each value by
-- how long it lasted. blocked_ns is the time with 1,024 or more ops
-- outstanding, when CUDA blocks the next launch.
--
-- @column trace VARCHAR           Trace label.
-- @column device INTEGER          GPU index.
-- @column stream BIGINT           Stream.
-- @column steps BIGINT            Points of the series (two per GPU op).
-- @column mean DOUBLE             Mean of the values.
-- @column std DOUBLE              Their sample standard deviation.
-- @column min BIGINT              Smallest value.
-- @column p25 DOUBLE              25th percentile.
-- @column p50 DOUBLE              Median.
-- @column p75 DOUBLE              75th percentile.
-- @column max BIGINT              Largest value.
-- @column mean_weighted DOUBLE    Time-weighted mean from the first step to the last.
-- @column blocked_ns BIGINT       Time with at least 1,024 ops outstanding, nanoseconds.
WITH steps AS (
    SELECT trace_id, device, stream, launch_ts_ns AS at_ns, 1 AS delta, id FROM gpu_ops WHERE launch_id IS NOT NULL
    UNION ALL
    SELECT trace_id, device, stream, end_ns, -1, id FROM gpu_ops WHERE launch_id IS NOT NULL
),
series AS (
    SELECT trace_id, device, stream, at_ns,
           sum(delta) OVER w AS queue,
           lead(at_ns) OVER w - at_ns AS lasts_ns
    FROM steps
    WINDOW w AS (PARTITION BY trace_id, device, stream ORDER BY at_ns, delta, id ROWS UNBOUNDED PRECEDING)
)
SELECT t.trace, s.device, s.stream, count(*) AS steps, avg(queue) AS mean,
       -- Rounded: a parallel float aggregate differs in the last bits from run to run.
       round(stddev_samp(queue), 9) AS std,
       min(queue)::BIGINT AS min, quantile_cont(queue, 0.25) AS p25, quantile_cont(queue, 0.5) AS p50,
       quantile_cont(queue, 0.75) AS p75, max(queue)::BIGINT AS max,
       sum(queue * lasts_ns) / nullif(sum(lasts_ns), 0) AS mean_weighted,
       coalesce(sum(lasts_ns) FILTER (WHERE queue >= 1024), 0)::BIGINT AS blocked_ns
FROM series s JOIN traces t USING (trace_id)
GROUP BY t.trace, s.device, s.stream
ORDER BY t.trace, s.device, s.stream;
