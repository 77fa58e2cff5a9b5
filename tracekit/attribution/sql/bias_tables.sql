-- Position-bias tables read by the heads in a call: the reads, and how many (none: attribution/bias_none).
--
-- Before the call's softmax (or its fused op), an op reading a table [P, H] by aten::index, index_select or
-- embedding, H the heads of the call's first 4-D product or fused op's query (Swin's
-- relative_position_bias_table[index] before its SDPA op, Hugging Face T5's relative_attention_bias before
-- QK^T, the plain-torch T5's between QK^T and the softmax), is a position bias's lookup; a table by the rotary
-- dim D is a rotary embedding's, not this. attribution/bias_slices takes in what makes its index and shapes it.
--
-- @reads _slice_stages, _call_anchors, cpu_slices, _cpu
-- @creates _bias_tables   Per bias table read: call_id, id (the reading op), lane, parent_id.
CREATE OR REPLACE TEMP TABLE _bias_tables AS
WITH heads AS (
    SELECT x.call_id, arg_min(TRY_CAST(json_extract_string(s.input_dims, '$[0][1]') AS BIGINT), c.pos) AS h,
           any_value(coalesce(a.softmax_pos, a.product_pos, a.core_pos)) AS before_pos
    FROM _slice_stages x JOIN cpu_slices s ON s.id = x.x JOIN _cpu c ON c.id = x.x
    JOIN _call_anchors a ON a.call_id = x.call_id
    WHERE x.d.stage IN ('matmul', 'fused_attention') AND x.x = x.d.decider
      AND json_array_length(s.input_dims->'$[0]') = 4
    GROUP BY x.call_id
)
SELECT x.call_id, x.x AS id, c.lane, s.parent_id
FROM _slice_stages x JOIN heads h USING (call_id) JOIN cpu_slices s ON s.id = x.x JOIN _cpu c ON c.id = x.x
WHERE s.name IN ('aten::index', 'aten::index_select', 'aten::embedding') AND c.pos < h.before_pos
  AND json_array_length(s.input_dims->'$[0]') = 2
  AND TRY_CAST(json_extract_string(s.input_dims, '$[0][1]') AS BIGINT) = h.h;

SELECT count(*) FROM _bias_tables;
