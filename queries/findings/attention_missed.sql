-- GPU time that looks like attention but was not attributed to it.
--
-- Two kinds of rows, per trace and kernel name: kernels named like attention or
-- softmax (softmax, attn, attention, fmha, flash, sdpa, mha) launched outside every
-- attention call that no rule gave a stage (reason outside_call: a softmax-heavy
-- model whose attention no label, module, op or eager pattern found), and GPU ops
-- inside an attention call that stayed other (reason other_in_call: a module or op
-- no rule knows). The finding fires for a trace when these rows hold at least 1 % of
-- its GPU op time; extend module_stages.csv, op_stages.csv or kernel_stages.csv (see
-- docs/attribution.md) with --rules. Orphans (no launch in the trace) are left out.
--
-- @column trace VARCHAR        Trace label.
-- @column reason VARCHAR       outside_call or other_in_call.
-- @column name VARCHAR         Kernel (GPU op) name as written.
-- @column cpu_op_name VARCHAR  Innermost CPU op of a launch (one of them).
-- @column gpu_ops BIGINT       GPU ops of this name and reason.
-- @column total_ns BIGINT      Their summed duration, nanoseconds.
-- @column share_pct DOUBLE     100 * total_ns / GPU op time of the trace.
WITH ops AS (
    SELECT g.trace_id, g.name, g.cpu_op_name, g.dur_ns, s.stage, s.call_id,
           sum(g.dur_ns) OVER (PARTITION BY g.trace_id) AS trace_ns
    FROM gpu_ops g
    JOIN gpu_op_stages s USING (id)
    WHERE NOT g.orphan
),
missed AS (
    SELECT trace_id, CASE WHEN call_id IS NULL THEN 'outside_call' ELSE 'other_in_call' END AS reason, name,
           any_value(cpu_op_name) AS cpu_op_name, count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS total_ns,
           100.0 * sum(dur_ns) / any_value(trace_ns) AS share
    FROM ops
    WHERE stage = 'other'
      AND (call_id IS NOT NULL OR regexp_matches(kernel_base(name), '(?i)softmax|attn|attention|fmha|flash|sdpa|(^|[^a-z])mha'))
    GROUP BY ALL
),
fired AS (
    SELECT *, sum(share) OVER (PARTITION BY trace_id) AS trace_share FROM missed
)
SELECT t.trace, f.reason, f.name, f.cpu_op_name, f.gpu_ops, f.total_ns, round(f.share, 3) AS share_pct
FROM fired f
JOIN traces t USING (trace_id)
WHERE f.trace_share >= 1.0
ORDER BY t.trace, f.total_ns DESC, f.name, f.reason;
