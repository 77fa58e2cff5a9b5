-- A GEMM op's reduction and output widths from its recorded Input Dims, as [k, n] (BIGINT[]); NULL for any
-- other op. The one place GEMM operands are read: gemm_shape builds on it, and the attribution's projection
-- widths read it alone (in features k, out features n), two extractions per op on a hot step.
--
-- aten::mm, _scaled_mm, matmul and bmm: A(..., K) B(..., K, N); aten::addmm and baddbmm: bias, A(..., K),
-- B(..., K, N); aten::linear: x(..., K) W(N, K).
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates gemm_kn
CREATE OR REPLACE {{macro}} gemm_kn(name, input_dims) AS (
    CASE
        WHEN name IN ('aten::mm', 'aten::_scaled_mm', 'aten::matmul', 'aten::bmm')
            THEN [TRY_CAST(input_dims->>'$[0][#-1]' AS BIGINT), TRY_CAST(input_dims->>'$[1][#-1]' AS BIGINT)]
        WHEN name IN ('aten::addmm', 'aten::baddbmm')
            THEN [TRY_CAST(input_dims->>'$[1][#-1]' AS BIGINT), TRY_CAST(input_dims->>'$[2][#-1]' AS BIGINT)]
        WHEN name = 'aten::linear'
            THEN [TRY_CAST(input_dims->>'$[0][#-1]' AS BIGINT), TRY_CAST(input_dims->>'$[1][0]' AS BIGINT)]
    END
);
