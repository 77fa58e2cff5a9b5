-- Every GPU op with its attention stage, the source that decided it and its call.
--
-- The row-level view behind stage_breakdown: which rule put each kernel where.
-- source is label (a record_function stage label), op (the launching op),
-- gpu_annotation (Kineto's GPU projection of a label, for orphans), kernel (the
-- kernel name) or none (stage other). By default GPU ops with no launch in the
-- trace (orphans) are left out.
--
-- @param include_orphans BOOLEAN = false   Also list GPU ops launched before the trace began.
-- @param attention_only BOOLEAN = false    Only GPU ops of a stage other than "other".
-- @column trace VARCHAR              Trace label.
-- @column gpu_op_id BIGINT           gpu_ops.id.
-- @column name VARCHAR               Kernel, memcpy or memset name.
-- @column stage VARCHAR              Attention stage.
-- @column source VARCHAR             label, module, op, backward, gpu_annotation, kernel, sequence (place in the kernel order around an attention kernel) or none.
-- @column call_id BIGINT             Attention call (attention_calls.call_id), NULL outside one.
-- @column dur_ns BIGINT              Duration, nanoseconds.
-- @column ts_ns BIGINT               Start on the GPU, nanoseconds.
-- @column attention_kernel BOOLEAN   Counted in kernel-level attention time.
-- @column orphan BOOLEAN             No launch in the trace.
-- @column rule VARCHAR               The deciding rule's pattern.
SELECT t.trace, s.id AS gpu_op_id, s.name, s.stage, s.source, s.call_id, s.dur_ns, g.ts_ns,
       s.attention_kernel, s.orphan, s.rule
FROM gpu_op_stages s
JOIN gpu_ops g USING (id)
JOIN traces t ON t.trace_id = s.trace_id
WHERE ($include_orphans OR NOT s.orphan) AND (NOT $attention_only OR s.stage <> 'other')
ORDER BY t.trace, g.ts_ns, s.id;
