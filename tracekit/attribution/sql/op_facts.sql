-- What the position rules need of an op's arguments, for the ops in calls they may resolve.
--
-- appends: a concatenation that appends to 4-D [batch, heads, seq, head_dim] tensors along the sequence
-- axis, a KV cache growing (Hugging Face DynamicCache: cat([keys, new], dim=-2); StaticCache:
-- index_copy_(2, ...)); the dim is the op's second argument either way, and a trace without shapes cannot
-- tell. low_rank: recorded inputs, none of them a tensor of 3 or more dimensions, so not q or k (a KV cache's
-- position arithmetic, StaticCache's cache_position + 1); NULL without shapes. weight_product: x @ W.T.
--
-- @param stages LIST     The stages whose ops may be resolved by these facts (concat, matmul and assign.ROPE_OPS).
-- @reads cpu_slices, _marked, _slice_calls
-- @creates _op_facts     Per op: id, appends, low_rank, weight_product.
CREATE OR REPLACE TEMP TABLE _op_facts AS
SELECT s.id,
       TRY_CAST(s.concrete_inputs->>'$[1]' AS INTEGER) IN (2, -2)
           AND regexp_matches(s.input_dims::VARCHAR, '\[-?\d+,-?\d+,-?\d+,-?\d+\]') AS appends,
       NOT regexp_matches(s.input_dims::VARCHAR, '\[-?\d+,-?\d+,-?\d+') AS low_rank,
       {{include attribution/weight_product op=s}} AS weight_product
FROM cpu_slices s
WHERE s.id IN (SELECT id FROM _marked WHERE stage IN {{stages}} AND id IN (SELECT x FROM _slice_calls));
