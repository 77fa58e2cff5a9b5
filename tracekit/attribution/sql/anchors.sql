-- The positions in a call that resolve compares with: aggregates over its decided stages (grouped by call).
--
-- The first softmax, the first matmul, the start of the core, its first and last product (product_pos,
-- core_end_pos: the core ends with its last product, softmax or fused kernel, so scale/mask/dropout after it
-- are the output block's), the first projection and the first rotation (not an op on tensors below 3-D:
-- position arithmetic is not a rotation). attribution/rope_anchors adds the rest.
--
-- @fragment
-- @param stage IDENT     The decided stage.
-- @param pos IDENT       Its position on the axis.
-- @param low_rank IDENT  Whether the deciding op's recorded inputs are all below 3-D (false: not known).
-- @param core LIST       The core's stages: matmul and assign.CORE_STAGES.
-- @param products LIST   The core's products (assign.PRODUCTS).
min({{pos}}) FILTER (WHERE {{stage}} = 'softmax') AS softmax_pos,
min({{pos}}) FILTER (WHERE {{stage}} = 'matmul') AS first_matmul_pos,
min({{pos}}) FILTER (WHERE {{stage}} IN {{core}}) AS core_pos,
min({{pos}}) FILTER (WHERE {{stage}} IN {{products}}) AS product_pos,
max({{pos}}) FILTER (WHERE {{stage}} IN {{products}}) AS core_end_pos,
min({{pos}}) FILTER (WHERE {{stage}} IN ('proj', 'qkv_proj')) AS first_proj_pos,
min({{pos}}) FILTER (WHERE {{stage}} = 'rotate' AND NOT coalesce({{low_rank}}, false)) AS rotate_pos
