-- Memcpy ops launched inside an attention call.
--
-- A device copy inside attention is usually a hidden clone: the post's naive
-- variant calls out-of-place masked_fill, which first copies the whole
-- [B, H, S, S] score matrix (Memcpy DtoD) and then fills it; in-place
-- masked_fill_ removes the copy. One row per memcpy GPU op whose launch lies
-- inside an attention call (gpu_op_stages.call_id), with the op that launched
-- it and the op whose stage rule decided it (the call-level op the copy
-- belongs to, e.g. aten::masked_fill). Orphans have no launch and never count,
-- nor do the copies of a tensor-parallel collective (stage tp_comm: vLLM's
-- all-reduce stages its input in and out of a shared buffer; no in-place
-- variant of an attention op avoids them).
--
-- @column trace VARCHAR         Trace label.
-- @column call_id BIGINT        Attention call (attention_calls.call_id).
-- @column gpu_op_id BIGINT      gpu_ops.id of the memcpy.
-- @column name VARCHAR          Memcpy name as written, e.g. Memcpy DtoD (Device -> Device).
-- @column stage VARCHAR         Attention stage the memcpy was attributed to.
-- @column cpu_op_name VARCHAR   Innermost CPU op of the launch, e.g. aten::copy_.
-- @column deciding_op VARCHAR   The op or label whose rule decided the stage, e.g. aten::masked_fill.
-- @column bytes BIGINT          Bytes copied (NULL when not reported).
-- @column dur_ns BIGINT         Duration, nanoseconds.
SELECT t.trace, s.call_id, g.id AS gpu_op_id, g.name, s.stage, g.cpu_op_name, d.name AS deciding_op,
       g.bytes, g.dur_ns
FROM gpu_ops g
JOIN gpu_op_stages s USING (id)
JOIN traces t ON t.trace_id = g.trace_id
LEFT JOIN cpu_stages cs ON cs.id = g.launch_id
LEFT JOIN cpu_slices d ON d.id = cs.decider_id
WHERE g.kind = 'memcpy' AND s.call_id IS NOT NULL AND NOT g.orphan AND s.stage <> 'tp_comm'
ORDER BY t.trace, g.dur_ns DESC, g.id;
