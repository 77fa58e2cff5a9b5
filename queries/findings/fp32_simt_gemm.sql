-- FP32 matrix math on CUDA cores (SIMT) instead of tensor cores.
--
-- Kernels whose name the rule_kernel_precision table classes as fp32_simt
-- (sgemm, ffma xmma, scudnn, FP32 gemv: see the kernel_classes query for every
-- name and its rule). Tensor cores need half-precision or TF32 inputs; the
-- post's SDPA math backend upcasts bf16 to FP32 and runs ampere_sgemm on CUDA
-- cores where the naive variant runs bf16 s16816gemm. One row per trace and
-- kernel name; share_pct is the name's share of the trace's summed kernel
-- time; in_attention counts its kernels launched inside an attention call.
-- Orphans (no launch in the trace) are left out.
--
-- @column trace VARCHAR        Trace label.
-- @column name VARCHAR         Kernel name as written.
-- @column gpu_ops BIGINT       Kernels of this name.
-- @column in_attention BIGINT  Of those, launched inside an attention call.
-- @column total_ns BIGINT      Summed duration, nanoseconds.
-- @column share_pct DOUBLE     100 * total_ns / summed duration of all kernels of the trace.
-- @column rule VARCHAR         Pattern of the deciding rule_kernel_precision row.
WITH kernels AS (
    SELECT g.trace_id, g.name, g.dur_ns, s.call_id
    FROM gpu_ops g
    JOIN gpu_op_stages s USING (id)
    WHERE g.kind = 'kernel' AND NOT g.orphan
),
names AS (
    SELECT trace_id, name, count(*) AS gpu_ops, count(call_id) AS in_attention, sum(dur_ns)::BIGINT AS total_ns,
           100.0 * sum(dur_ns) / sum(sum(dur_ns)) OVER (PARTITION BY trace_id) AS share
    FROM kernels
    GROUP BY trace_id, name
)
SELECT t.trace, n.name, n.gpu_ops, n.in_attention, n.total_ns, round(n.share, 3) AS share_pct, f.rule
FROM names n
JOIN kernel_precision_classes f USING (name)
JOIN traces t USING (trace_id)
WHERE f.precision = 'fp32_simt'
ORDER BY t.trace, n.total_ns DESC, n.name;
