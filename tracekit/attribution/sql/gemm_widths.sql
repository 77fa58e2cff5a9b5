-- A projection op's input and output widths (in and out features) as {i, o}; NULL for an op that is no projection.
--
-- linear, addmm, mm and _scaled_mm; x @ W.T (attribution/weight_product); and a GEMM whose output tensor is
-- its first argument (vLLM's cutlass_scaled_mm(out, a, b, ...)), whose out features are that tensor's last dim.
-- The widths are gemm_kn's k and n (the one place GEMM operands are read).
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
END
