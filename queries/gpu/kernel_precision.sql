-- Kernel time on tensor cores vs FP32 on CUDA cores vs the rest, from kernel names.
--
-- One row per trace and precision class, read from kernel names by the
-- rule_kernel_precision table (see kernel_classes for the class and deciding
-- rule of every name): tensor_core (MMA shapes such as s16816 / h884 /
-- i8816, wmma / xmma / hmma / gmma, CUTLASS tensorop, nvjet, AMD MFMA and
-- Tensile MI tiles, fused attention kernels), fp32_simt (FP32 GEMM and
-- convolution on CUDA cores: sgemm, ffma xmma, scudnn, FP32 gemv) and other
-- (elementwise, reductions, copies, communication, unrecognized names). The
-- post's SDPA math backend shows up as fp32_simt sgemm where the naive
-- variant runs bf16 s16816gemm on tensor cores. Only kernels count (kind =
-- 'kernel'); by default kernels with no launch in the trace (orphans) are left
-- out. share_pct divides summed durations, so overlapping streams can add
-- up to more than the busy time.
--
-- @param include_orphans BOOLEAN = false   Also count kernels launched before the trace began.
-- @column trace VARCHAR          Trace label.
-- @column precision VARCHAR      tensor_core, fp32_simt or other.
-- @column gpu_ops BIGINT         Kernels of this class.
-- @column kernels BIGINT         Distinct kernel names of this class.
-- @column total_ns BIGINT        Summed duration, nanoseconds.
-- @column share_pct DOUBLE       100 * total_ns / summed duration of all counted kernels of the trace.
-- @column top_kernel VARCHAR     The class's heaviest kernel name (largest total_ns; ties by name).
-- @column top_kernel_ns BIGINT   Summed duration of top_kernel, nanoseconds.
WITH names AS (
    SELECT * FROM kernel_totals($include_orphans)
),
classified AS (
    SELECT n.*, f.precision AS precision,
           row_number() OVER (PARTITION BY n.trace_id, f.precision
                              ORDER BY n.total_ns DESC, n.name) AS rank
    FROM names n JOIN kernel_precision_classes f USING (name)
),
classes AS (
    SELECT trace_id, precision, sum(gpu_ops)::BIGINT AS gpu_ops, count(*) AS kernels,
           sum(total_ns)::BIGINT AS total_ns,
           any_value(name) FILTER (WHERE rank = 1) AS top_kernel,
           any_value(total_ns) FILTER (WHERE rank = 1) AS top_kernel_ns
    FROM classified
    GROUP BY trace_id, precision
)
SELECT t.trace, c.precision, c.gpu_ops, c.kernels, c.total_ns,
       round(100.0 * c.total_ns / sum(c.total_ns) OVER (PARTITION BY c.trace_id), 3) AS share_pct,
       c.top_kernel, c.top_kernel_ns
FROM classes c
JOIN traces t USING (trace_id)
ORDER BY t.trace, c.total_ns DESC, c.precision;
