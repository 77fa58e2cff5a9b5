-- A projection op's input and output widths (in and out features) as {i, o}; NULL for an op that is no projection.
--
-- linear, addmm, mm and _scaled_mm; x @ W.T (attribution/weight_product); and a GEMM whose output tensor is
-- its first argument (vLLM's cutlass_scaled_mm(out, a, b, ...)), whose out features are that tensor's last dim.
-- The widths are gemm_kn's k and n (the one place aten GEMM operands are read). Any other library's GEMM op (a
-- name outside aten:: ending in a word with gemm or _mm: aiter::gemm_a16w16, sgl_kernel::fp8_scaled_mm,
-- trtllm::fp8_block_scaling_gemm) reads x(..., K) first and a 2-D weight after it, [N, K] or [K, N]: the in
-- features are x's last dim, the out features the weight's other dim (a packed or quantized weight whose dims
-- hold no K gives none: no projection is invented).
--
-- @fragment
-- @param op IDENT        The cpu_slices row (name, input_dims).
CASE WHEN {{op}}.name IN ('aten::linear', 'aten::addmm', 'aten::mm', 'aten::_scaled_mm')
          THEN struct_pack(i := gemm_kn({{op}}.name, {{op}}.input_dims)[1],
                           o := gemm_kn({{op}}.name, {{op}}.input_dims)[2])
     WHEN {{include attribution/weight_product op=op}}
          THEN struct_pack(i := gemm_kn('aten::matmul', {{op}}.input_dims)[1],
                           o := gemm_kn('aten::matmul', {{op}}.input_dims)[2])
     WHEN regexp_matches({{op}}.name, '(?i)(^|::)cutlass_scaled_mm$')
          THEN struct_pack(i := TRY_CAST({{op}}.input_dims->>'$[1][#-1]' AS BIGINT),
                           o := TRY_CAST({{op}}.input_dims->>'$[0][#-1]' AS BIGINT))
     WHEN NOT starts_with({{op}}.name, 'aten::') AND regexp_matches({{op}}.name, '(?i)::\w*(gemm|_mm)\w*$')
          THEN struct_pack(
                   i := TRY_CAST({{op}}.input_dims->>'$[0][#-1]' AS BIGINT),
                   o := list_transform(
                            list_filter(TRY_CAST({{op}}.input_dims AS BIGINT[][])[2:],
                                        lambda w: len(w) = 2 AND list_contains(w, TRY_CAST({{op}}.input_dims->>'$[0][#-1]' AS BIGINT))),
                            lambda w: w[1] + w[2] - TRY_CAST({{op}}.input_dims->>'$[0][#-1]' AS BIGINT))[1])
END
