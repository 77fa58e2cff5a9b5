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
--   below D); a 2-D [P, D] or [P, D/2] rotary table when the query has several heads; or an op a rule names
--   rope, kv_cache or qk_norm (named_head_stages: vLLM's and SGLang's [T, H * D] rows show no head dim);
-- - G, a reshape of heads (a view, split, slice, transpose, ... of a tensor whose last dim is a multiple of D);
-- - N, neither end nor start: an op on no tensor of 2+ dims (or recorded without inputs and holding no other
--   op: Dynamo's cache lookup), an allocation (empty, empty_like), a quantization (a value conversion), or a
--   constant multiple of a [.., n * D] tensor (OPT's q pre-scale);
-- - M, a mask or the probabilities: tensors [.., Skv] or [.., Sq or 1, Skv], one of them 2-D, broadcasting a
--   row or holding the core's batch x heads (nn.MultiheadAttention's key_padding_mask merged into its
--   attn_mask before the core, its weights averaged over the heads after it): neither end nor start;
-- - L (siblings without shapes only), a norm: a norm op, or a run of casts, pow, mean, add, rsqrt, mul around
--   an rsqrt (an RMSNorm written in ops);
-- - R, a tensor-parallel collective: an op a rule names comm_stage (vLLM's all_reduce after a row-parallel o_proj);
-- - X, anything else (a norm, a residual add, an MLP op).
--
-- Without recorded shapes (the profiler's default) a core's siblings are classed by their names alone, through
-- the op rules that name them: P an op a rule names a projection (proj: aten's GEMM entry points but matmul,
-- which without shapes looks like the core's products, cutlass_scaled_mm, another library's GEMM op), R, B
-- (named ops only), M a reduction after the core (mean, sum: the weights averaged over the heads) or an op a
-- rule names mask before it (zeros_like, masked_fill_: a mask made, not an add), G a
-- reshape or an op a rule names layout (casts, copies, quantization), N an allocation or
-- the rotary positions (arange), L a norm op (a rule's norm, or a name that says one, not fused with the
-- residual add), X anything else.
--
-- @param block_before INT          How many sibling ops before the core a block may reach (eager.BLOCK_BEFORE).
-- @param block_after INT           How many after it (eager.BLOCK_AFTER).
-- @param comm_stage TEXT           The stage of tensor-parallel communication (eager.TP_COMM).
-- @param named_head_stages LIST    Stages whose named ops are head ops whatever their shapes (eager.NAMED_HEAD_STAGES).
-- @param norm_ops TEXT             The ops an RMSNorm is written in (eager.NORM_OPS), for siblings without shapes.
-- @param reshape_names TEXT        A reshape op's name: view, split, transpose, ... (eager.RESHAPE_NAMES).
-- @reads _eager_found, _eager_siblings, _eager_call_ops, _eager_lift, _op_match
-- @creates _eager_block_cores      The cores: qk_id (the first product's id, or the call op's), qk_i, pv_i (its first and last sibling number), lane, parent_id, d, sq, skv, qb, qh, qrank, shaped.
-- @creates _eager_sibling_classes  Per core and sibling in reach (i): shaped (its core's), cls (P, B, G, N, M, R, X; L unshaped), m_prev (unshaped: the class before an L or its run), gemm (a projection's widths), max_rank (its tensors' most dims), last_dims (an X before the core: its tensors' last dims), residual_add (an add of two activations of one shape), prev_pv_i.
-- (A lifted core, attribution/eager_lift, is its wrapper among the wrapper's siblings.)
CREATE OR REPLACE TEMP TABLE _eager_block_cores AS
SELECT f.qk_id, coalesce(w.i, f.qk_i) AS qk_i, coalesce(w.i, f.pv_i) AS pv_i, f.lane,
       CASE WHEN w.id IS NULL THEN q.parent_id ELSE w.parent_id END AS parent_id, f.a_inner AS d, f.sq, f.skv,
       {{include attribution/operand_dim op=q path=$[0][0] bias_path=$[1][0]}} AS qb,
       {{include attribution/operand_dim op=q path=$[0][1] bias_path=$[1][1]}} AS qh,
       json_array_length(CASE WHEN q.name = 'aten::baddbmm' THEN q.input_dims->'$[1]'
                              ELSE q.input_dims->'$[0]' END) AS qrank,
       coalesce(f.a_inner > 0 AND f.skv IS NOT NULL, false) AS shaped
FROM _eager_found f JOIN _eager_siblings q ON q.id = f.qk_id
LEFT JOIN _eager_lift l ON l.core_id = f.qk_id LEFT JOIN _eager_siblings w ON w.id = l.id
UNION ALL
SELECT o.id, b.i, b.i, o.lane, b.parent_id, o.d, o.sq, o.skv, o.qb, o.qh, o.qrank, o.qrank IS NOT NULL
FROM _eager_call_ops o LEFT JOIN _eager_lift l ON l.core_id = o.id
JOIN _eager_siblings b ON b.id = coalesce(l.id, o.id);

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
    FROM f  -- (every core bounds its neighbours' windows, shaped or not)
),
rows AS (
    SELECT x.*, b.name, b.input_dims,
           list_transform(regexp_extract_all(CAST(b.input_dims AS VARCHAR), '\[(-?[0-9]+(, ?-?[0-9]+)*)\]', 1),
                          lambda x: CAST(string_split(replace(x, ' ', ''), ',') AS BIGINT[])) AS shapes,
           {{include attribution/gemm_widths op=b}} AS gemm, om.m.stage AS named,
           -- (an op recorded without inputs that holds no other: Dynamo's cache lookup, not autograd's
           -- evaluate_function wrappers)
           b.input_dims IS NULL AND NOT EXISTS (SELECT 1 FROM cpu_slices c WHERE c.parent_id = b.id) AS bare_leaf
    FROM idx x JOIN _eager_siblings b
      ON b.lane = x.lane AND coalesce(b.parent_id, -1) = coalesce(x.parent_id, -1) AND b.i = x.i
    LEFT JOIN _op_match om ON om.name = b.name
)
-- (A projection's widths, the last dims of the others before the core: see attribution/eager_block_ends.)
SELECT qk_id, qk_i, pv_i, i, prev_pv_i, shaped, cls, m_prev, CASE WHEN cls = 'P' THEN gemm END AS gemm,
       coalesce(list_max(list_transform(shapes, lambda s: len(s))), 0) AS max_rank,
       CASE WHEN cls = 'X' AND i < qk_i THEN list_distinct(list_transform(shapes, lambda s: s[-1])) END
           AS last_dims,
       -- (a residual add: two activations of one shape, 3+ dims, added)
       cls = 'X' AND regexp_matches(name, '^aten::add_?$') AND len(shapes) >= 2 AND len(shapes[1]) >= 3
           AND shapes[1] = shapes[2] AS residual_add
FROM (
-- Without shapes, a norm written in ops (a run of casts, pow, mean, add, rsqrt, mul around an rsqrt: Qwen3's
-- q_norm and k_norm) is L, and m_prev the class before the run; a run with an add that neither an rsqrt nor
-- a mul follows (a residual add: before the layer's norm, Granite's mul, add, norm and Gemma 2's post-norm,
-- add, next input norm; after it, OLMo-2's post-norm then add; not the norm's own epsilon add, before its
-- rsqrt, nor Gemma's 1 + weight, before a mul) is X. A mul or div right after a projection is q's
-- pre-scale (OPT): N.
SELECT *,
       CASE WHEN shaped THEN cls0
            WHEN arith AND has_rsqrt THEN CASE WHEN residual THEN 'X' ELSE 'L' END
            WHEN cls0 = 'X' AND regexp_matches(name, '^aten::(mul|div)_?$') AND before = 'P' THEN 'N'
            ELSE cls0 END AS cls,
       -- (a norm op right after another takes the class before both: Persimmon's q and k LayerNorms in a row)
       CASE WHEN arith AND has_rsqrt THEN run_prev WHEN cls0 = 'L' THEN before_norms ELSE before END AS m_prev
FROM (
SELECT *,
       bool_or(arith AND name = 'aten::rsqrt') OVER run AS has_rsqrt,
       bool_or(arith AND name IN ('aten::add', 'aten::add_')
               AND coalesce(next_name NOT IN ('aten::rsqrt', 'aten::mul', 'aten::mul_'), true)) OVER run
           AS residual,
       first_value(CASE WHEN NOT arith THEN cls0 END IGNORE NULLS) OVER run AS run_prev
FROM (
SELECT *, lag(cls0) OVER (PARTITION BY qk_id ORDER BY i) AS before,
       lead(name) OVER (PARTITION BY qk_id ORDER BY i) AS next_name,
       last_value(CASE WHEN cls0 <> 'L' THEN cls0 END IGNORE NULLS)
           OVER (PARTITION BY qk_id ORDER BY i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_norms,
       -- (a run of arithmetic shares its island with the op right before it)
       sum(CASE WHEN arith THEN 0 ELSE 1 END) OVER (PARTITION BY qk_id ORDER BY i ROWS UNBOUNDED PRECEDING) AS island
FROM (
SELECT *, NOT shaped AND i < qk_i AND regexp_matches(name, {{norm_ops}}) AS arith,
       CASE WHEN NOT shaped THEN
                -- Without recorded shapes: what the names say (attribution/eager_block_ends bounds these blocks
                -- by their projections instead).
                CASE WHEN named = 'proj' THEN 'P'
                     WHEN named = {{comm_stage}} THEN 'R'
                     -- (after the core, a reduction is nn.MultiheadAttention's weights averaged over the heads)
                     WHEN named = 'reduce' AND i > pv_i THEN 'M'
                     -- (before the core, a mask built, not applied: nn.MultiheadAttention's key_padding_mask
                     -- made float; an add is the residual's as often as the mask's)
                     WHEN named = 'mask' AND i < qk_i AND NOT regexp_matches(name, '^aten::add_?$') THEN 'M'
                     WHEN named IN {{named_head_stages}} THEN 'B'
                     WHEN named = 'layout' OR regexp_matches(name, {{reshape_names}}) THEN 'G'
                     WHEN regexp_matches(name, '^aten::(empty|empty_like|empty_strided|new_empty|new_empty_strided|arange)$')
                          THEN 'N'
                     -- (a norm fused with the residual add, fused_add_rms_norm, is the layer's: X)
                     WHEN (named = 'norm' OR regexp_matches(name, '(?i)(^|::|_)(rms_?norm|layer_?norm|group_?norm)'))
                          AND NOT regexp_matches(name, '(?i)add') THEN 'L'
                     ELSE 'X' END
            WHEN gemm.o > 0 AND gemm.o % d = 0 THEN 'P'
            WHEN named = {{comm_stage}} THEN 'R'
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
                     OR len(s) = 3 AND s[2] IN (sq, skv) AND s[3] > 0 AND s[3] < d AND s[3] % 2 = 0
                     -- a rotary table of positions by D or D/2 (vLLM's and SGLang's cos_sin_cache [P, D] cast
                     -- before the rotary op) when the query has several heads (one head's D is a hidden width)
                     OR len(s) = 2 AND (s[2] = d OR 2 * s[2] = d) AND qh > 1)) > 0
                 THEN 'B'
            -- A reshape of heads: view, split, slice, transpose, ...
            WHEN regexp_matches(name, {{reshape_names}}) AND heads_wide THEN 'G'
            -- (or one recorded without inputs that holds no other op: Dynamo's cache lookup before a compiled region)
            WHEN bare_leaf OR len(list_filter(shapes, lambda s: len(s) >= 2)) = 0 THEN 'N'
            -- An allocation (an output buffer a serving layer makes before its attention or norm op) holds no value.
            WHEN regexp_matches(name, '^aten::(empty|empty_like|empty_strided|new_empty|new_empty_strided)$') THEN 'N'
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
            ELSE 'X' END AS cls0
-- A tensor of 2+ dims whose last is a multiple of D (heads side by side, or all of them).
FROM (SELECT *, len(list_filter(shapes, lambda s: len(s) >= 2 AND s[-1] % d = 0)) > 0 AS heads_wide,
             -- the core's batch x heads: a 4-D query's B * H, a 3-D product's first dim
             CASE WHEN qrank = 4 THEN qb * qh WHEN qrank = 3 THEN qb END AS bh
      FROM rows)
))
WINDOW run AS (PARTITION BY qk_id, island ORDER BY i ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
)) r;
