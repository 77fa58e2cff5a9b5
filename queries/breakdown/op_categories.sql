-- GPU time per op category (GEMM, attention, elementwise, ...): TraceLens's ops_summary_by_category.
--
-- op_summary's rows summed per category (the categories are data:
-- rules/op_categories.csv, extended with --rules). share_pct is of all
-- counted GPU op time of the trace. Orphans are left out unless include_orphans.
--
-- @uses op_summary
-- @column trace VARCHAR          Trace label.
-- @column category VARCHAR       GEMM, attention, elementwise, reduce, norm, conv, memcpy, communication or other.
-- @column ops BIGINT             Distinct CPU op names in the category.
-- @column calls BIGINT           Calls of those ops.
-- @column gpu_ops BIGINT         GPU ops.
-- @column kernel_ns BIGINT       Their summed duration, nanoseconds.
-- @column share_pct DOUBLE       100 * kernel_ns / summed duration of all counted GPU ops of the trace.
SELECT trace, category, count(DISTINCT op) AS ops, sum(calls)::BIGINT AS calls, sum(gpu_ops)::BIGINT AS gpu_ops,
       sum(kernel_ns)::BIGINT AS kernel_ns,
       100.0 * sum(kernel_ns) / sum(sum(kernel_ns)) OVER (PARTITION BY trace) AS share_pct
FROM op_summary
GROUP BY trace, category
ORDER BY trace, kernel_ns DESC, category;
