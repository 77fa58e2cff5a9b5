-- GEMM calls by shape: FLOPs, bytes, kernel time, TFLOP/s, TB/s and the roofline bound (TraceLens's GEMM sheet).
--
-- A GEMM call is a CPU op aten::mm, addmm, bmm, baddbmm, _scaled_mm, linear or
-- matmul (gemm_op_names) with no other such op below it (linear -> addmm counts
-- once, as the addmm); its kernel time is every GPU op launched in its subtree.
-- Shapes come from Input Dims (record_shapes; the gemm_shape macro): mm A(M,K) B(K,N); addmm bias, A, B; bmm
-- A(batch,M,K) B(batch,K,N); baddbmm bias, A, B; _scaled_mm A, B (bias when
-- three inputs); linear x(...,K) W(N,K) [bias] with M the product of x's
-- leading dims; matmul as mm, or batched over A's leading dims. flops_per_call =
-- batch * (2*M*N*K + M*N when there is a bias); bytes_per_call = batch *
-- (M*K + K*N + M*N + N when biased) elements of A's dtype (a _scaled_mm with
-- 1-byte inputs writes 2-byte outputs), as TraceLens's perf models count them.
-- tflops_per_s and tbps divide the summed FLOPs/bytes by the summed kernel time
-- (TraceLens also gives per-call means). The roofline columns use
-- rules/device_peaks.csv: the first row whose pattern matches the device's
-- name (or whose device starts with the device parameter, e.g. H100) for the
-- call's dtype; bound is compute when the call's FLOPs per byte exceed the
-- ridge point (peak_tflops / peak_tbps), else memory. Orphan GPU ops have no
-- CPU op and never count.
--
-- @param device VARCHAR = auto   Device for the roofline: a name such as H100 or MI300X, or auto (each trace's first GPU).
-- @column trace VARCHAR              Trace label.
-- @column op VARCHAR                 The GEMM op (aten::addmm, ...).
-- @column batch BIGINT               Batch count (1 unless batched).
-- @column m BIGINT                   M: rows of A and of the output.
-- @column n BIGINT                   N: columns of B and of the output.
-- @column k BIGINT                   K: the reduced dimension.
-- @column dtype VARCHAR              A's dtype as written (c10::BFloat16, float, ...).
-- @column calls BIGINT               Calls with this op, shape and dtype that launched GPU work.
-- @column flops_per_call BIGINT      FLOPs of one call.
-- @column bytes_per_call BIGINT      Bytes read and written by one call (A, B, output, bias).
-- @column kernel_ns BIGINT           Summed duration of the GPU ops the calls launched, nanoseconds.
-- @column tflops_per_s DOUBLE        calls * flops_per_call / kernel time, TFLOP/s.
-- @column tbps DOUBLE                calls * bytes_per_call / kernel time, TB/s.
-- @column roofline_device VARCHAR    Device of the peak-table row used (NULL: no row for this device and dtype).
-- @column peak_tflops DOUBLE         Its peak TFLOP/s for the dtype (dense).
-- @column peak_tbps DOUBLE           Its peak memory bandwidth, TB/s.
-- @column bound VARCHAR              compute or memory: which roof the call's FLOPs per byte hit.
-- @column roofline_pct DOUBLE        Achieved TFLOP/s as a share of the roofline at this intensity (min(peak, intensity * bandwidth)).
WITH gemm_ops AS (
    SELECT s.id, s.trace_id, s.name, s.input_dims, s.input_types, c.kernel_ns
    FROM op_subtree_gpu(gemm_op_names()) c
    JOIN cpu_slices s ON s.id = c.op_id
    WHERE c.named_below = 0 AND c.kernel_ns IS NOT NULL
),
dims AS (
    SELECT l.id, l.trace_id, l.name, l.input_dims,
           CAST(json_extract(l.input_dims, '$[2]') AS BIGINT[]) AS d2,
           json_array_length(l.input_dims) AS inputs,
           json_extract_string(l.input_types, '$[0]') AS t0, json_extract_string(l.input_types, '$[1]') AS t1,
           l.kernel_ns
    FROM gemm_ops l
),
shaped AS (
    SELECT id, trace_id, name, kernel_ns,
           gemm_shape(name, input_dims) AS bmnk,
           CASE name WHEN 'aten::addmm' THEN true WHEN 'aten::baddbmm' THEN true
                     WHEN 'aten::_scaled_mm' THEN inputs = 3
                     WHEN 'aten::linear' THEN coalesce(len(d2), 0) > 0 ELSE false END AS bias,
           CASE WHEN name IN ('aten::addmm', 'aten::baddbmm') THEN t1 ELSE t0 END AS dtype
    FROM dims
),
sized AS (
    SELECT *, bmnk[1] AS batch, bmnk[2] AS m, bmnk[3] AS n, bmnk[4] AS k,
           dtype_bytes(dtype) AS bpe,
           peak_dtype(dtype) AS peak_dtype
    FROM shaped
    WHERE bmnk IS NOT NULL AND list_count(bmnk) = 4
),
per_call AS (
    SELECT *, batch * (2 * m * n * k + CASE WHEN bias THEN m * n ELSE 0 END) AS flops,
           batch * (m * k * bpe + k * n * bpe + m * n * CASE WHEN name = 'aten::_scaled_mm' AND bpe = 1 THEN 2 ELSE bpe END
                    + CASE WHEN bias THEN n * bpe ELSE 0 END) AS bytes
    FROM sized
),
grouped AS (
    SELECT trace_id, name AS op, batch, m, n, k, dtype, any_value(peak_dtype) AS peak_dtype, count(*) AS calls,
           any_value(flops)::BIGINT AS flops_per_call, any_value(bytes)::BIGINT AS bytes_per_call,
           sum(kernel_ns)::BIGINT AS kernel_ns
    FROM per_call
    GROUP BY trace_id, name, batch, m, n, k, dtype
)
SELECT t.trace, g.op, g.batch, g.m, g.n, g.k, g.dtype, g.calls, g.flops_per_call, g.bytes_per_call, g.kernel_ns,
       CASE WHEN g.kernel_ns > 0 THEN g.calls * g.flops_per_call / g.kernel_ns / 1e3 END AS tflops_per_s,
       CASE WHEN g.kernel_ns > 0 THEN g.calls * g.bytes_per_call / g.kernel_ns / 1e3 END AS tbps,
       p.device AS roofline_device, p.peak_tflops, p.peak_tbps,
       CASE WHEN p.device IS NULL OR g.bytes_per_call IS NULL THEN NULL
            WHEN g.flops_per_call / g.bytes_per_call > p.peak_tflops / p.peak_tbps THEN 'compute' ELSE 'memory' END
           AS bound,
       CASE WHEN g.kernel_ns > 0 AND p.device IS NOT NULL AND g.bytes_per_call > 0
            THEN 100.0 * (g.calls * g.flops_per_call / g.kernel_ns / 1e3)
                 / least(p.peak_tflops, g.flops_per_call / g.bytes_per_call * p.peak_tbps) END AS roofline_pct
FROM grouped g
JOIN traces t USING (trace_id)
LEFT JOIN roofline_peaks($device) p ON p.trace_id = g.trace_id AND p.dtype = g.peak_dtype
ORDER BY t.trace, g.kernel_ns DESC, g.op, g.batch, g.m, g.n, g.k, g.dtype;
