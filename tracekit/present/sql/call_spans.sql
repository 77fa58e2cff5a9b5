-- The attention calls of a trace (bound as the one parameter) per device they ran on: their GPU span, streams and facts.
--
-- Every call, orphan-only ones too (all their GPU ops launched before the trace began: orphan), as
-- attention_calls holds them; the queries leave those out unless include_orphans=true.
--
-- @fragment
-- @reads gpu_op_stages, gpu_ops, attention_calls
SELECT g.call_id, o.pid, min(o.ts_ns) AS ts_ns, max(o.end_ns) AS end_ns, list(DISTINCT o.tid) AS tids,
       coalesce(any_value(c.impl), 'unknown') AS impl, any_value(c.op) AS op,
       any_value(c.call_source) AS call_source, any_value(c.gpu_ops) AS gpu_ops,
       any_value(c.gpu_ns) AS gpu_ns, any_value(c.attention_kernel_ns) AS attention_kernel_ns,
       any_value(c.cpu_ns) AS cpu_ns, any_value(c.flops) AS flops,
       any_value(c.batch) AS batch, any_value(c.heads) AS heads, any_value(c.kv_heads) AS kv_heads,
       any_value(c.seq_q) AS seq_q, any_value(c.seq_kv) AS seq_kv, any_value(c.head_dim) AS head_dim,
       any_value(c.causal) AS causal, any_value(c.dtype) AS dtype, coalesce(any_value(c.orphan), false) AS orphan
FROM gpu_op_stages g JOIN gpu_ops o ON o.id = g.id
LEFT JOIN attention_calls c ON c.trace_id = g.trace_id AND c.call_id = g.call_id
WHERE g.trace_id = ? AND g.call_id IS NOT NULL
GROUP BY g.call_id, o.pid
ORDER BY o.pid, ts_ns, end_ns, g.call_id
