-- GPU time per CPU op: calls, GPU ops and kernel time, heaviest first (TraceLens's ops_summary).
--
-- Each GPU op belongs to the innermost CPU op around its launch (TraceLens's
-- direct kernel time); GPU ops with no CPU op (graph replays launched outside
-- any op, no-correlation ops) form the row '(no CPU op)'. Its category: a GPU
-- op that gpu_breakdown counts as memcpy or communication (the gpu_op_category
-- macro, the one definition of both) is that; every other GPU op (a memset
-- too: computation there) takes the first op rule (by rule_order) of
-- rules/op_categories.csv (data; extend with --rules) matching the op's name,
-- else the first kernel rule matching the GPU op's name, else other. An op
-- whose GPU ops fall in several categories has a row per category. kernel_ns
-- sums GPU op durations (memcpys and memsets included), share_pct is of all
-- counted GPU op time of the trace. Orphans are left out unless include_orphans
-- (TraceLens counts them in its kernel summary but not in its timeline, and
-- leaves hipMemsetAsync memsets without their op: here they have it).
--
-- @param include_orphans BOOLEAN = false   Also count GPU ops launched before the trace began.
-- @column trace VARCHAR          Trace label.
-- @column op VARCHAR             Innermost CPU op around the launch (aten::addmm, ...), or '(no CPU op)'.
-- @column category VARCHAR       GEMM, attention, elementwise, reduce, norm, conv, memcpy, communication or other (rules/op_categories.csv).
-- @column calls BIGINT           Calls of the op that launched these GPU ops.
-- @column gpu_ops BIGINT         GPU ops.
-- @column kernel_ns BIGINT       Their summed duration, nanoseconds.
-- @column kernel_ns_per_call DOUBLE  kernel_ns / calls (NULL for '(no CPU op)').
-- @column share_pct DOUBLE       100 * kernel_ns / summed duration of all counted GPU ops of the trace.
-- @column cumulative_pct DOUBLE  Running share_pct in this order.
WITH g AS MATERIALIZED (
    SELECT trace_id, kind, name, cpu_op_id, cpu_op_name, dur_ns, gpu_op_category(kind, name) AS bucket
    FROM gpu_ops
    WHERE $include_orphans OR NOT orphan
),
op_rule AS (
    SELECT d.cpu_op_name, arg_min(r.category, r.rule_order) AS category
    FROM (SELECT DISTINCT cpu_op_name FROM g WHERE cpu_op_name IS NOT NULL) d
    JOIN rule_op_categories r ON r.applies_to = 'op' AND regexp_matches(d.cpu_op_name, r.pattern)
    GROUP BY d.cpu_op_name
),
kernel_rule AS (
    SELECT d.name, arg_min(r.category, r.rule_order) AS category
    FROM (SELECT DISTINCT name FROM g) d
    JOIN rule_op_categories r ON r.applies_to = 'kernel' AND regexp_matches(d.name, r.pattern)
    GROUP BY d.name
),
categorized AS (
    SELECT g.*, CASE WHEN g.bucket IN ('memcpy', 'communication') THEN g.bucket
                     ELSE coalesce(o.category, k.category, 'other') END AS category
    FROM g LEFT JOIN op_rule o ON o.cpu_op_name = g.cpu_op_name LEFT JOIN kernel_rule k ON k.name = g.name
),
per_op AS (
    SELECT trace_id, coalesce(cpu_op_name, '(no CPU op)') AS op, category, count(DISTINCT cpu_op_id) AS calls,
           count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS kernel_ns
    FROM categorized GROUP BY ALL
),
shared AS (
    SELECT *, 100.0 * kernel_ns / nullif(sum(kernel_ns) OVER (PARTITION BY trace_id), 0) AS share_pct FROM per_op
)
SELECT t.trace, s.op, s.category, s.calls, s.gpu_ops, s.kernel_ns,
       CASE WHEN s.calls > 0 THEN s.kernel_ns / s.calls END AS kernel_ns_per_call, s.share_pct,
       sum(s.share_pct) OVER (PARTITION BY s.trace_id ORDER BY s.kernel_ns DESC, s.op, s.category
                              ROWS UNBOUNDED PRECEDING) AS cumulative_pct
FROM shared s JOIN traces t USING (trace_id)
ORDER BY t.trace, s.kernel_ns DESC, s.op, s.category;
