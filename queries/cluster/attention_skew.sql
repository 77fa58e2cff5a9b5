-- Attention stages across ranks: the slowest rank against the median rank, per stage.
--
-- Built on stage_breakdown (GPU op time per trace and attention stage). For each
-- job and stage, every trace of the job that has GPU ops counts, with 0 for a
-- stage it does not have; skew_pct is how far the slowest rank lies above the
-- median rank, in percent. A stage that takes the same time on every rank reads
-- 0; a straggling rank's stages read high. Stages with no GPU time anywhere are
-- left out.
--
-- @uses stage_breakdown
-- @column job VARCHAR             Job (traces.job; NULL: no job id recorded).
-- @column stage VARCHAR           Attention stage.
-- @column ranks BIGINT            Traces of the job compared.
-- @column median_gpu_ns DOUBLE    Median over the ranks of the stage's GPU op time, ns.
-- @column max_gpu_ns BIGINT       The slowest rank's GPU op time for the stage, ns.
-- @column slowest_trace VARCHAR   Trace of the slowest rank (ties: the lowest rank).
-- @column slowest_rank INTEGER    Its rank.
-- @column skew_pct DOUBLE         100 * (max_gpu_ns - median_gpu_ns) / median_gpu_ns (NULL when the median is 0).
WITH per AS (
    SELECT trace, stage, gpu_ns FROM stage_breakdown
),
ranked AS (
    SELECT t.job, t.trace, t.rank, st.stage, coalesce(p.gpu_ns, 0) AS gpu_ns
    FROM traces t
    JOIN (SELECT DISTINCT trace FROM per WHERE gpu_ns > 0) has USING (trace)
    CROSS JOIN (SELECT DISTINCT stage FROM per WHERE gpu_ns > 0) st
    LEFT JOIN per p ON p.trace = t.trace AND p.stage = st.stage
)
SELECT job, stage, count(*) AS ranks, median(gpu_ns)::DOUBLE AS median_gpu_ns, max(gpu_ns)::BIGINT AS max_gpu_ns,
       arg_max(trace, (gpu_ns, -coalesce(rank, 2147483647))) AS slowest_trace,
       arg_max(rank, (gpu_ns, -coalesce(rank, 2147483647))) AS slowest_rank,
       round(100.0 * (max(gpu_ns) - median(gpu_ns)) / nullif(median(gpu_ns), 0), 3) AS skew_pct
FROM ranked
GROUP BY job, stage
ORDER BY job NULLS FIRST, max_gpu_ns - median_gpu_ns DESC, stage;
