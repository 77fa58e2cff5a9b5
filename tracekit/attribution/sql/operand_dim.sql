-- One dimension of a product op's operand, from its Input Dims (NULL for an einsum, whose dims are a tensor list).
--
-- baddbmm's operands follow its bias, so its path is another.
--
-- @fragment
-- @param op IDENT        The product's cpu_slices row (name, input_dims).
-- @param path TEXT       The dimension's JSON path for bmm and matmul ('$[0][#-2]': the left operand's second last).
-- @param bias_path TEXT  The same dimension's path for baddbmm ('$[1][#-2]').
CASE WHEN {{op}}.name = 'aten::baddbmm' THEN TRY_CAST(json_extract_string({{op}}.input_dims, {{bias_path}}) AS BIGINT)
     WHEN {{op}}.name = 'aten::einsum' THEN NULL
     ELSE TRY_CAST(json_extract_string({{op}}.input_dims, {{path}}) AS BIGINT) END
