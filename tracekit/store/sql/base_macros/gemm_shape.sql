-- A GEMM op's shape from its recorded Input Dims, as [batch, m, n, k] (BIGINT[]); NULL for any other op or
-- dims it cannot read. k and n are gemm_kn's (the one place GEMM operands are read); batch and m come from
-- the left operand's leading dims. gemm_calls' FLOPs and bytes read it.
--
-- aten::mm and aten::_scaled_mm A(M,K) B(K,N); aten::addmm bias, A(M,K), B(K,N); aten::bmm A(b,M,K) B(b,K,N);
-- aten::baddbmm bias, A(b,M,K), B(b,K,N); aten::linear x(..., K) W(N, K) (the leading dims are M);
-- aten::matmul 2-D x 2-D as mm, or x(..., M, K) @ B(..., K, N) with the leading dims of x as the batch.
-- The leading dims are cut with list_slice's explicit ends: DuckDB's x[:-1] keeps the last element.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates gemm_shape
CREATE OR REPLACE {{macro}} gemm_shape(name, input_dims) AS (
    CASE name
        WHEN 'aten::mm' THEN [1, TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])[1], gemm_kn(name, input_dims)[2], gemm_kn(name, input_dims)[1]]
        WHEN 'aten::_scaled_mm' THEN [1, TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])[1], gemm_kn(name, input_dims)[2], gemm_kn(name, input_dims)[1]]
        WHEN 'aten::addmm' THEN [1, TRY_CAST(json_extract(input_dims, '$[1]') AS BIGINT[])[1], gemm_kn(name, input_dims)[2], gemm_kn(name, input_dims)[1]]
        WHEN 'aten::bmm' THEN [TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])[1], TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])[2], gemm_kn(name, input_dims)[2], gemm_kn(name, input_dims)[1]]
        WHEN 'aten::baddbmm' THEN [TRY_CAST(json_extract(input_dims, '$[1]') AS BIGINT[])[1], TRY_CAST(json_extract(input_dims, '$[1]') AS BIGINT[])[2], gemm_kn(name, input_dims)[2], gemm_kn(name, input_dims)[1]]
        WHEN 'aten::linear' THEN [1, list_product(list_slice(TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[]), 1, len(TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])) - 1))::BIGINT, gemm_kn(name, input_dims)[2], gemm_kn(name, input_dims)[1]]
        WHEN 'aten::matmul' THEN
            CASE WHEN len(TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])) = 2 AND len(TRY_CAST(json_extract(input_dims, '$[1]') AS BIGINT[])) = 2 THEN [1, TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])[1], gemm_kn(name, input_dims)[2], gemm_kn(name, input_dims)[1]]
                 WHEN len(TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])) >= 3 AND len(TRY_CAST(json_extract(input_dims, '$[1]') AS BIGINT[])) >= 2
                     THEN [list_product(list_slice(TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[]), 1, len(TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])) - 2))::BIGINT, TRY_CAST(json_extract(input_dims, '$[0]') AS BIGINT[])[-2], gemm_kn(name, input_dims)[2], gemm_kn(name, input_dims)[1]]
            END
    END
);
