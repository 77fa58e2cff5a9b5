-- The cores eager attention is looked for around: softmax ops outside every call, and call ops with a recorded query.
--
-- A softmax counts when it is the outermost (its parent is no softmax) and no call holds it; its name is
-- matched per distinct op name, not per row. A call op (SDPA, flash_attn, a serving op) counts when it is
-- the outermost call op, not a backward op (a backward op's siblings are autograd's nodes, not its forward's
-- block), and its recorded query has 3 or more dims: unlabelled, the call is the op alone until its block
-- widens it. An op that holds its own projections (self_contained) has no head dim to read its neighbours by:
-- only the mask ops right before it join it. The last statement counts both (none: nothing more to do).
--
-- @param softmax TEXT         A softmax op's name (eager.SOFTMAX).
-- @param self_contained TEXT  A call op that holds its own projections (eager.SELF_CONTAINED): no head dim.
-- @reads cpu_slices, _cpu, _marked, _slice_marks
-- @creates _eager_softmax    The softmaxes: id, parent_id, lane, pos, input_dims.
-- @creates _eager_call_ops   The call ops: id, name, parent_id, lane, d (the query's head dim), qrank (its dims), qb, qh (batch and heads), sq, skv (of a [B, H, S, D] query, or a self-contained op's [B, S, E]).
CREATE OR REPLACE TEMP TABLE _eager_softmax AS
SELECT s.id, s.parent_id, c.lane, c.pos, s.input_dims
FROM cpu_slices s JOIN _cpu c USING (id)
LEFT JOIN cpu_slices p ON p.id = s.parent_id
-- The pattern is matched per distinct op name, not per row.
WHERE s.kind = 'cpu_op'
  AND s.name IN (SELECT name FROM (SELECT DISTINCT name FROM cpu_slices WHERE kind = 'cpu_op')
                 WHERE regexp_matches(name, {{softmax}}))
  AND NOT coalesce(regexp_matches(p.name, {{softmax}}), false)
  AND s.id NOT IN (SELECT x.x FROM _slice_marks x JOIN _marked m ON m.mkey = x.mkey WHERE m.is_call);

CREATE OR REPLACE TEMP TABLE _eager_call_ops AS
SELECT id, name, parent_id, lane,
       -- An op that holds its own projections (nn.MultiheadAttention's fast path, query [B, S, E]) shows no
       -- head dim: only the mask ops before it join it.
       CASE WHEN NOT own_proj THEN TRY_CAST(json_extract_string(dims, '$[0][#-1]') AS BIGINT) END AS d, qrank,
       TRY_CAST(json_extract_string(dims, '$[0][0]') AS BIGINT) AS qb,
       CASE WHEN NOT own_proj THEN TRY_CAST(json_extract_string(dims, '$[0][1]') AS BIGINT) END AS qh,
       -- [B, H, S, D]'s S, [B, S, E]'s of an op that holds its projections; a [T, H, D] query's dims do not give S.
       CASE WHEN qrank = 4 THEN TRY_CAST(json_extract_string(dims, '$[0][2]') AS BIGINT)
            WHEN own_proj THEN TRY_CAST(json_extract_string(dims, '$[0][1]') AS BIGINT) END AS sq,
       CASE WHEN qrank = 4 THEN TRY_CAST(json_extract_string(dims, '$[1][#-2]') AS BIGINT)
            WHEN own_proj THEN TRY_CAST(json_extract_string(dims, '$[1][1]') AS BIGINT) END AS skv
FROM (
    SELECT m.id, s.name, s.parent_id, c.lane, s.input_dims AS dims,
           json_array_length(s.input_dims->'$[0]') AS qrank, regexp_matches(s.name, {{self_contained}}) AS own_proj
    FROM _marked m JOIN cpu_slices s USING (id) JOIN _cpu c USING (id)
    WHERE m.is_call AND m.kind = 'cpu_op'
      -- A backward op's siblings are autograd's nodes, not its forward's block.
      AND NOT regexp_matches(s.name, '_backward')
      AND m.id NOT IN (SELECT x.x FROM _slice_marks x JOIN _marked o ON o.mkey = x.mkey
                       WHERE o.is_call AND o.mkey <> x.x)
-- A query of 3+ dims gives D; a trace without recorded shapes gives none (the block is then read off the names).
) WHERE dims IS NULL OR qrank >= 3 AND (own_proj OR TRY_CAST(json_extract_string(dims, '$[0][#-1]') AS BIGINT) > 0);

SELECT (SELECT count(*) FROM _eager_softmax) + (SELECT count(*) FROM _eager_call_ops);
