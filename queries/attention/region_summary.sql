-- Per labelled region (record_function range): occurrences, GPU ops and time per occurrence.
--
-- The profiler table's view of a region, from the trace: for every range name
-- (attn_fwd, sdpa_fwd, ProfilerStep#N, attention:flash, stage:softmax, ...) how often
-- it ran, how many GPU ops were launched inside one occurrence on average, their GPU
-- time per occurrence ("CUDA time avg" in key_averages) and the range's CPU time per
-- occurrence ("CPU time avg"). A GPU op belongs to every range its launch lies in.
-- This is how "naive: 6 kernels, in-place: 5, math: 20, flash: 1" is read.
--
-- @param pattern VARCHAR = .*   Only regions whose name matches this regular expression.
-- @column trace VARCHAR                    Trace label.
-- @column region VARCHAR                   Range name.
-- @column occurrences BIGINT               Number of ranges with this name.
-- @column gpu_ops BIGINT                   GPU ops launched inside them, in all.
-- @column gpu_ops_per_occurrence DOUBLE    gpu_ops / occurrences.
-- @column gpu_time_avg_ns DOUBLE           Summed GPU op time per occurrence, nanoseconds.
-- @column cpu_time_avg_ns DOUBLE           Range duration per occurrence, nanoseconds.
-- @column gpu_time_total_ns BIGINT         Summed GPU op time of all occurrences, nanoseconds.
-- @column cpu_time_total_ns BIGINT         Summed range duration, nanoseconds.
WITH regions AS (
    SELECT id, trace_id, name, dur_ns FROM annotations WHERE regexp_matches(name, $pattern)
),
launch_region AS (
    SELECT c.id AS launch_id, unnest(c.annotation_ids) AS region_id
    FROM cpu_slices c WHERE c.kind IN ('runtime', 'driver') AND len(c.annotation_ids) > 0
),
per_occurrence AS (
    SELECT r.id, r.trace_id, r.name, r.dur_ns, count(g.id) AS gpu_ops, coalesce(sum(g.dur_ns), 0) AS gpu_ns
    FROM regions r
    LEFT JOIN launch_region lr ON lr.region_id = r.id
    LEFT JOIN gpu_ops g ON g.launch_id = lr.launch_id
    GROUP BY r.id, r.trace_id, r.name, r.dur_ns
)
SELECT t.trace, p.name AS region, count(*) AS occurrences, sum(p.gpu_ops)::BIGINT AS gpu_ops,
       round(sum(p.gpu_ops) / count(*), 3) AS gpu_ops_per_occurrence,
       round(sum(p.gpu_ns) / count(*), 3) AS gpu_time_avg_ns,
       round(avg(p.dur_ns), 3) AS cpu_time_avg_ns,
       sum(p.gpu_ns)::BIGINT AS gpu_time_total_ns, sum(p.dur_ns)::BIGINT AS cpu_time_total_ns
FROM per_occurrence p JOIN traces t USING (trace_id)
GROUP BY t.trace, p.name
ORDER BY t.trace, gpu_time_total_ns DESC, cpu_time_total_ns DESC, region;
