-- One row per attention call: implementation, GPU and CPU time, shapes and throughput.
--
-- A call is a record_function range labelled as one (attention:<impl>, attn_fwd,
-- sdpa_fwd, ...), an attention module scope (nn.Module: *Attention, with_modules),
-- an attention op (aten::scaled_dot_product_attention, flash_attn,
-- vllm::unified_attention_with_output, ...), an eager matmul -> softmax -> matmul
-- found by op order, or an attention kernel found by name outside any call
-- (CUDA/HIP-graph replays). gpu_ns is op-level time: every GPU op
-- launched inside the call, helper kernels included; attention_kernel_ns is
-- kernel-level time: the attention kernels only. Shapes come from the Input Dims of
-- the SDPA op (record_shapes), else of the QK^T product of an unfused call; flops = 4*B*H*Sq*Skv*D, halved when causal
-- (2.5 times that for a fused backward, aten::*_backward, a call of its own), and
-- tflops_per_s divides them by the kernel-level time. By default calls made only of
-- orphan GPU ops (launched before the trace began) are left out.
--
-- @empty No attention call: no label, op, module scope or kernel name matched an attention rule; wrap attention in record_function("attention:NAME") or record with with_modules=True next time, or add a rule (--rules; docs/attribution.md).
-- @param include_orphans BOOLEAN = false   Also list calls whose GPU ops were all launched before the trace began.
-- @column trace VARCHAR               Trace label.
-- @column rank INTEGER                The trace's rank (traces.rank; NULL when none was recorded).
-- @column call_id BIGINT              Call id (the range's or op's cpu_slices.id, the module's python_functions.id, or the kernel's gpu_ops.id).
-- @column impl VARCHAR                naive, eager, math, efficient, flash, cudnn, flex, paged, ... or unknown.
-- @column op VARCHAR                  Label, module scope, op or kernel that defines the call.
-- @column call_source VARCHAR         label, module, op, eager or kernel.
-- @column gpu_ops BIGINT              GPU ops launched inside the call.
-- @column gpu_ns BIGINT               Op-level GPU time, nanoseconds.
-- @column attention_kernel_ns BIGINT  Kernel-level GPU time (attention kernels only), nanoseconds.
-- @column cpu_ns BIGINT               CPU duration of the call's range or op, nanoseconds.
-- @column orphan BOOLEAN              All its GPU ops lack a launch in the trace.
-- @column batch BIGINT                Batch size.
-- @column heads BIGINT                Query heads.
-- @column kv_heads BIGINT             Key/value heads.
-- @column seq_q BIGINT                Query length.
-- @column seq_kv BIGINT               Key/value length.
-- @column head_dim BIGINT             Head dimension.
-- @column batch_heads BIGINT          batch * heads, or the leading dim of a 3-D QK^T bmm ([B*H, S, D]).
-- @column causal BOOLEAN              is_causal of the SDPA op.
-- @column dtype VARCHAR               Query dtype as written.
-- @column flops BIGINT                Floating-point operations of QK^T and PV.
-- @column tflops_per_s DOUBLE         flops / attention_kernel_ns, in TFLOP/s.
-- @column direction VARCHAR           forward, or backward (an autograd backward op); NULL for a call found by kernel name alone.
SELECT t.trace, t.rank, c.call_id, c.impl, c.op, c.call_source, c.gpu_ops, c.gpu_ns, c.attention_kernel_ns, c.cpu_ns,
       c.orphan, c.batch, c.heads, c.kv_heads, c.seq_q, c.seq_kv, c.head_dim, c.batch_heads, c.causal, c.dtype, c.flops,
       round(c.flops / nullif(c.attention_kernel_ns, 0) / 1000.0, 3) AS tflops_per_s, c.direction
FROM attention_calls c
JOIN traces t USING (trace_id)
WHERE $include_orphans OR NOT c.orphan
ORDER BY t.trace, c.ts_ns, c.call_id;
