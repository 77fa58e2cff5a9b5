-- The shaped cores, and each sibling op in reach of one classified by what it does to the heads.
--
-- The cores: each pattern (QK^T to PV) and each call op (itself), with what its shapes say (the head dim d,
-- the query's batch qb, heads qh, rank, sq and skv). With recorded shapes, each sibling within block_before /
-- block_after ops of a shaped core (never past a neighbouring core) is one of:
--
-- - P, a projection (attribution/gemm_widths) with out features a multiple of D;
-- - B, a head op: a tensor of 3+ dims whose last is D or D/2 (q, k, v, rotate_half's halves, the cos/sin
--   tables); a [B, H, S, ...] / [B, S, H, ...] of 4+ dims whose H divides the query's heads (grouped KV
--   heads; GPT-J's interleaved rotation stacks pairs) or whose H * S is the query's (Hugging Face's SDPA
--   path for grouped KV heads may pass q as [B, Hkv, n * S, D]); a partial rotary's [B, S, r] table (r even,
--   below D); or an op a rule names rope or kv_cache (named_head_stages: vLLM's [T, H * D] rows show no head
--   dim);
-- - G, a reshape of heads (a view, split, slice, transpose, ... of a tensor whose last dim is a multiple of D);
-- - N, neither end nor start: an op on no tensor of 2+ dims, a quantization (a value conversion), or a
--   constant multiple of a [.., n * D] tensor (OPT's q pre-scale);
-- - M, a mask or the probabilities: tensors [.., Skv] or [.., Sq or 1, Skv], one of them 2-D, broadcasting a
--   row or holding the core's batch x heads (nn.MultiheadAttention's key_padding_mask merged into its
--   attn_mask before the core, its weights averaged over the heads after it): neither end nor start;
-- - R, a tensor-parallel reduction (tp_reduction);
-- - X, anything else (a norm, a residual add, an MLP op).
--
-- @param block_before INT          How many sibling ops before the core a block may reach (eager.BLOCK_BEFORE).
-- @param block_after INT           How many after it (eager.BLOCK_AFTER).
-- @param tp_reduction TEXT         A tensor-parallel reduction op's name (eager.TP_REDUCTION).
-- @param named_head_stages LIST    Stages whose named ops are head ops whatever their shapes (eager.NAMED_HEAD_STAGES).
-- @reads _eager_found, _eager_siblings, _eager_call_ops, _op_match
-- @creates _eager_block_cores      The cores: qk_id (the first product's id, or the call op's), qk_i, pv_i (its first and last sibling number), lane, parent_id, d, sq, skv, qb, qh, qrank, shaped.
-- @creates _eager_sibling_classes  Per core and sibling in reach (i): cls (P, B, G, N, M, R, X), gemm (a projection's widths), max_rank (its tensors' most dims), last_dims (an X before the core: its tensors' last dims), prev_pv_i.
CREATE OR REPLACE TEMP TABLE _eager_block_cores AS
SELECT f.qk_id, f.qk_i, f.pv_i, f.lane, q.parent_id, f.a_inner AS d, f.sq, f.skv,
       {{include attribution/operand_dim op=q path=$[0][0] bias_path=$[1][0]}} AS qb,
       {{include attribution/operand_dim op=q path=$[0][1] bias_path=$[1][1]}} AS qh,
       json_array_length(CASE WHEN q.name = 'aten::baddbmm' THEN q.input_dims->'$[1]'
                              ELSE q.input_dims->'$[0]' END) AS qrank,
       coalesce(f.a_inner > 0 AND f.skv IS NOT NULL, false) AS shaped
FROM _eager_found f JOIN _eager_siblings q ON q.id = f.qk_id
UNION ALL
SELECT o.id, b.i, b.i, o.lane, o.parent_id, o.d, o.sq, o.skv, o.qb, o.qh, o.qrank, true
FROM _eager_call_ops o JOIN _eager_siblings b USING (id);

CREATE OR REPLACE TEMP TABLE _eager_sibling_classes AS
WITH f AS (
    SELECT f.*, lag(f.pv_i) OVER w AS prev_pv_i, lead(f.qk_i) OVER w AS next_qk_i
    FROM _eager_block_cores f
    WINDOW w AS (PARTITION BY f.lane, f.parent_id ORDER BY f.qk_i)
),
-- The window's sibling numbers, joined by equality (a range join would be a nested loop).
idx AS (
    SELECT f.*, unnest(list_concat(
               range(greatest(f.qk_i - {{block_before}}, coalesce(f.prev_pv_i, 0) + 1), f.qk_i),
               range(f.pv_i + 1, least(f.pv_i + ({{block_after}} + 1), coalesce(f.next_qk_i, f.pv_i + ({{block_after}} + 1))))))
               AS i
    FROM f WHERE f.shaped  -- (every core bounds its neighbours' windows, shaped or not)
),
rows AS (
    SELECT x.*, b.name, b.input_dims,
           list_transform(regexp_extract_all(CAST(b.input_dims AS VARCHAR), '\[(-?[0-9]+(, ?-?[0-9]+)*)\]', 1),
                          lambda x: CAST(string_split(replace(x, ' ', ''), ',') AS BIGINT[])) AS shapes,
           {{include attribution/gemm_widths op=b}} AS gemm, om.m.stage AS named
    FROM idx x JOIN _eager_siblings b
      ON b.lane = x.lane AND coalesce(b.parent_id, -1) = coalesce(x.parent_id, -1) AND b.i = x.i
    LEFT JOIN _op_match om ON om.name = b.name
)
-- (A projection's widths, the last dims of the others before the core: see attribution/eager_block_ends.)
SELECT qk_id, qk_i, pv_i, i, prev_pv_i, cls, CASE WHEN cls = 'P' THEN gemm END AS gemm,
       coalesce(list_max(list_transform(shapes, lambda s: len(s))), 0) AS max_rank,
       CASE WHEN cls = 'X' AND i < qk_i THEN list_distinct(list_transform(shapes, lambda s: s[-1])) END
           AS last_dims
FROM (
SELECT *,
       CASE WHEN gemm.o > 0 AND gemm.o % d = 0 THEN 'P'
            WHEN regexp_matches(name, {{tp_reduction}}) THEN 'R'
            -- An op a rule names a rotary embedding or a KV-cache write (vLLM's _C::rotary_embedding
            -- and reshape_and_cache_flash work on [T, H * D] rows: no head dim in their shapes).
            WHEN named IN {{named_head_stages}} THEN 'B'
            WHEN len(list_filter(shapes, lambda s: len(s) >= 3 AND (s[-1] = d OR 2 * s[-1] = d)
                     OR len(s) >= 4 AND qrank = 4 AND s[1] IN (qb, 1)
                        -- (CASE, not AND: DuckDB evaluates both sides, and a 0 dim, an empty KV cache, divides by zero)
                        AND (CASE WHEN s[2] > 0 THEN qh % s[2] = 0 END AND s[3] IN (sq, skv)
                             OR s[2] IN (sq, skv) AND CASE WHEN s[3] > 0 THEN qh % s[3] = 0 END
                             -- heads folded into the op's rows (GQA by reshape: q as [B, Hkv, n * S, D])
                             OR s[2] * s[3] = qh * sq)
                     -- a partial rotary's cos/sin table: [B, S, r], r even and below D
                     OR len(s) = 3 AND s[2] IN (sq, skv) AND s[3] > 0 AND s[3] < d AND s[3] % 2 = 0)) > 0
                 THEN 'B'
            -- A reshape of heads: view, split, slice, transpose, ...
            WHEN regexp_matches(name, '^aten::(view|reshape|_unsafe_view|unflatten|split|split_with_sizes|chunk|unbind|slice|narrow|select|contiguous|permute|transpose|t|numpy_T|mT|clone|expand|unsqueeze|squeeze)$')
                 AND heads_wide THEN 'G'
            WHEN len(list_filter(shapes, lambda s: len(s) >= 2)) = 0 THEN 'N'
            -- A value conversion (fp8 quantization of q before the attention op) is neither:
            -- static_scaled_fp8_quant, aten::quantize_per_tensor; not quantile.
            WHEN regexp_matches(name, '(?i)(^|::|_)(de)?quant(ize)?(_|$)') THEN 'N'
            -- q scaled by a constant right after its projection (OPT, BART): [B, S, n * D] times a scalar.
            WHEN regexp_matches(name, '^aten::(mul|div)_?$') AND json_array_length(input_dims) >= 2
                 AND json_array_length(input_dims->'$[1]') = 0 AND heads_wide THEN 'N'
            -- A mask or the probabilities: every tensor of 2+ dims is [.., Skv] (2-D) or [.., Sq or 1, Skv],
            -- and one is 2-D, broadcasts a row ([.., 1, Skv]) or holds the core's batch x heads
            -- (nn.MultiheadAttention: key_padding_mask [B, S] merged into attn_mask [Sq, Skv] as
            -- [B * H, 1, Skv]; the weights [B * H, Sq, Skv] averaged over the heads as [B, H, Sq, Skv]).
            WHEN sq IS NOT NULL AND skv IS NOT NULL
                 AND len(list_filter(shapes, lambda s: len(s) >= 2)) > 0
                 AND len(list_filter(shapes, lambda s: len(s) >= 2
                                     AND NOT coalesce(s[-1] = skv AND (len(s) = 2 OR s[-2] IN (sq, 1)), false))) = 0
                 AND len(list_filter(shapes, lambda s: len(s) = 2 OR len(s) >= 3 AND s[-2] = 1
                                     OR len(s) = 3 AND s[1] = bh OR len(s) = 4 AND s[1] * s[2] = bh)) > 0
                 THEN 'M'
            ELSE 'X' END AS cls
-- A tensor of 2+ dims whose last is a multiple of D (heads side by side, or all of them).
FROM (SELECT *, len(list_filter(shapes, lambda s: len(s) >= 2 AND s[-1] % d = 0)) > 0 AS heads_wide,
             -- the core's batch x heads: a 4-D query's B * H, a 3-D product's first dim
             CASE WHEN qrank = 4 THEN qb * qh WHEN qrank = 3 THEN qb END AS bh
      FROM rows)
) r;
