-- Convolution calls by shape: FLOPs, bytes, kernel time, TFLOP/s, TB/s and the roofline bound (TraceLens's CONV sheet).
--
-- A call is an aten::convolution op (the public entry; cudnn_/miopen_
-- convolution below it belong to it); its kernel time is every GPU op launched
-- in its subtree. Shapes come from Input Dims (input N,C,spatial...; weight
-- Cout,Cin/groups,kernel...; bias) and stride, padding, dilation, transposed
-- and groups from Concrete Inputs; output spatial size =
-- floor((in + 2*padding - dilation*(kernel-1) - 1) / stride) + 1 (transposed:
-- (in-1)*stride - 2*padding + dilation*(kernel-1) + output_padding + 1).
-- flops_per_call = 2 * N * Cout * prod(output spatial) * Cin/groups *
-- prod(kernel), as torch.utils.flop_counter counts a convolution (for a
-- transposed one the input's spatial size replaces the output's);
-- bytes_per_call = (input + weight + output [+ bias]) elements of the input's
-- dtype. FLOPs and bytes are NULL when the trace has no Concrete Inputs
-- (record_shapes in old profilers). Roofline as in gemm_calls.
--
-- @param device VARCHAR = auto   Device for the roofline: a name such as H100 or MI300X, or auto (each trace's first GPU).
-- @column trace VARCHAR              Trace label.
-- @column input_dims VARCHAR         Input shape [N, C, spatial...].
-- @column weight_dims VARCHAR        Weight shape [Cout, Cin/groups, kernel...].
-- @column stride VARCHAR             Stride per spatial dimension (NULL when not recorded).
-- @column padding VARCHAR            Padding per spatial dimension.
-- @column dilation VARCHAR           Dilation per spatial dimension.
-- @column groups BIGINT              Groups.
-- @column transposed BOOLEAN         A transposed convolution.
-- @column bias BOOLEAN               With a bias.
-- @column dtype VARCHAR              Input dtype as written.
-- @column calls BIGINT               Calls with this shape that launched GPU work.
-- @column flops_per_call BIGINT      FLOPs of one call (NULL without Concrete Inputs).
-- @column bytes_per_call BIGINT      Bytes read and written by one call.
-- @column kernel_ns BIGINT           Summed duration of the GPU ops the calls launched, nanoseconds.
-- @column tflops_per_s DOUBLE        calls * flops_per_call / kernel time, TFLOP/s.
-- @column tbps DOUBLE                calls * bytes_per_call / kernel time, TB/s.
-- @column roofline_device VARCHAR    Device of the peak-table row used.
-- @column bound VARCHAR              compute or memory.
-- @column roofline_pct DOUBLE        Achieved TFLOP/s as a share of the roofline at this intensity.
WITH convs AS (
    SELECT s.id, s.trace_id, s.input_dims, s.input_types, s.concrete_inputs, c.kernel_ns
    FROM op_subtree_gpu(['aten::convolution']) c JOIN cpu_slices s ON s.id = c.op_id
    WHERE c.kernel_ns IS NOT NULL
),
parsed AS (
    SELECT c.id, c.trace_id, c.kernel_ns,
           CAST(json_extract(c.input_dims, '$[0]') AS BIGINT[]) AS x,
           CAST(json_extract(c.input_dims, '$[1]') AS BIGINT[]) AS w,
           coalesce(json_array_length(json_extract(c.input_dims, '$[2]')), 0) > 0 AS bias,
           json_extract_string(c.input_types, '$[0]') AS dtype,
           TRY_CAST(json_extract_string(c.concrete_inputs, '$[3]') AS BIGINT[]) AS stride,
           TRY_CAST(json_extract_string(c.concrete_inputs, '$[4]') AS BIGINT[]) AS padding,
           TRY_CAST(json_extract_string(c.concrete_inputs, '$[5]') AS BIGINT[]) AS dilation,
           lower(json_extract_string(c.concrete_inputs, '$[6]')) = 'true' AS transposed,
           TRY_CAST(json_extract_string(c.concrete_inputs, '$[7]') AS BIGINT[]) AS output_padding,
           TRY_CAST(json_extract_string(c.concrete_inputs, '$[8]') AS BIGINT) AS groups
    FROM convs c
),
shaped AS (
    SELECT *,
           CASE WHEN stride IS NOT NULL AND len(stride) = len(x) - 2 THEN
               [CASE WHEN transposed
                     THEN (x[i + 2] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (w[i + 2] - 1)
                          + coalesce(output_padding[i], 0) + 1
                     ELSE (x[i + 2] + 2 * padding[i] - dilation[i] * (w[i + 2] - 1) - 1) // stride[i] + 1 END
                FOR i IN range(1, len(x) - 1)]
           END AS out_spatial,
           dtype_bytes(dtype) AS bpe,
           peak_dtype(dtype) AS peak_dtype
    FROM parsed
),
per_call AS (
    SELECT *,
           2 * x[1] * w[1] * w[2] * list_product(w[3:])::BIGINT
             * list_product(CASE WHEN transposed THEN x[3:] ELSE out_spatial END)::BIGINT AS flops,
           CASE WHEN out_spatial IS NOT NULL THEN
               bpe * (list_product(x)::BIGINT + list_product(w)::BIGINT
                      + x[1] * w[1] * list_product(out_spatial)::BIGINT
                      + CASE WHEN bias THEN w[1] ELSE 0 END) END AS bytes
    FROM shaped
),
grouped AS (
    SELECT trace_id, x, w, stride, padding, dilation, groups, transposed, bias, dtype, any_value(peak_dtype) AS peak_dtype,
           count(*) AS calls, any_value(flops)::BIGINT AS flops_per_call, any_value(bytes)::BIGINT AS bytes_per_call,
           sum(kernel_ns)::BIGINT AS kernel_ns
    FROM per_call GROUP BY ALL
)
SELECT t.trace, CAST(g.x AS VARCHAR) AS input_dims, CAST(g.w AS VARCHAR) AS weight_dims,
       CAST(g.stride AS VARCHAR) AS stride, CAST(g.padding AS VARCHAR) AS padding,
       CAST(g.dilation AS VARCHAR) AS dilation, g.groups, g.transposed, g.bias, g.dtype, g.calls, g.flops_per_call,
       g.bytes_per_call, g.kernel_ns,
       CASE WHEN g.kernel_ns > 0 THEN g.calls * g.flops_per_call / g.kernel_ns / 1e3 END AS tflops_per_s,
       CASE WHEN g.kernel_ns > 0 THEN g.calls * g.bytes_per_call / g.kernel_ns / 1e3 END AS tbps,
       p.device AS roofline_device,
       CASE WHEN p.device IS NULL OR g.bytes_per_call IS NULL OR g.bytes_per_call = 0 THEN NULL
            WHEN g.flops_per_call / g.bytes_per_call > p.peak_tflops / p.peak_tbps THEN 'compute' ELSE 'memory' END
           AS bound,
       CASE WHEN g.kernel_ns > 0 AND p.device IS NOT NULL AND g.bytes_per_call > 0
            THEN 100.0 * (g.calls * g.flops_per_call / g.kernel_ns / 1e3)
                 / least(p.peak_tflops, g.flops_per_call / g.bytes_per_call * p.peak_tbps) END AS roofline_pct
FROM grouped g
JOIN traces t USING (trace_id)
LEFT JOIN roofline_peaks($device) p ON p.trace_id = g.trace_id AND p.dtype = g.peak_dtype
ORDER BY t.trace, g.kernel_ns DESC, input_dims, weight_dims, stride, padding, dilation, g.groups, g.dtype;
