-- Whether a cpu_slices row is a linear layer written as x @ W.T (Falcon): a projection, not one of the core's products.
--
-- A matmul of activations with 3 or more dims by a 2-D weight.
--
-- @fragment
-- @param op IDENT        The cpu_slices row.
({{op}}.name = 'aten::matmul' AND json_array_length({{op}}.input_dims->'$[0]') >= 3
 AND json_array_length({{op}}.input_dims->'$[1]') = 2)
