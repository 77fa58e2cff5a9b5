-- A decided stage with the position-dependent ones resolved by where the decider sits in its call.
--
-- matmul is qk_matmul before the call's softmax and pv_matmul after it (without a softmax: the first matmul
-- is QK^T); proj is qkv_proj before the call's first product or fused op (its core when it has neither) and
-- out_proj after it; norm is pre_norm before the call's first projection, qk_norm between the projections
-- and the core, and out_proj after the core (the output block's norm). When positional holds (a generic op
-- or module decided, not a label), scale/mask/dropout ops after the core belong to the output block
-- (out_proj: the residual add, the output dropout). In a call that rotates (rotate: aten::neg,
-- view_as_complex, ...) before its first product, the scale/mask ops before that product are its rotary
-- embedding (rope: q * cos + rotate_half(q) * sin), and so are the layout ops among them (rotate_half's
-- cat); nested marks rows inside an op that is an attention call itself, which keep their stage. A concat
-- that appends along the sequence axis before the core's first product is a KV-cache update (kv_cache);
-- otherwise layout. A rotation after the core's first product is not a rotary embedding (before the
-- softmax it shifts the scores: mask). reduce (mean, sum)
-- after the core is out_proj (MultiheadAttention's averaged weights), before it other.
--
-- @fragment
-- @param stage IDENT       The decided stage.
-- @param pos IDENT         Its position.
-- @param anchor IDENT      The call's anchors row (attribution/anchors and attribution/rope_anchors).
-- @param positional IDENT  Whether a generic op or module decided (not a label).
-- @param nested IDENT      Whether the row is inside an op that is an attention call itself.
-- @param low_rank IDENT    Whether the deciding op's recorded inputs are all below 3-D (false: not known).
-- @param appends IDENT     Whether the deciding op appends along the sequence axis (false: not known).
-- @param rope_ops LIST     The stages a plain-op rotary embedding is made of (assign.ROPE_OPS).
CASE WHEN {{include attribution/rope_candidate stage=stage pos=pos anchor=anchor positional=positional nested=nested low_rank=low_rank rope_ops=rope_ops}}
     THEN 'rope' ELSE CASE {{stage}}
    WHEN 'matmul' THEN
        CASE WHEN {{anchor}}.softmax_pos IS NOT NULL
             THEN CASE WHEN {{pos}} < {{anchor}}.softmax_pos THEN 'qk_matmul' ELSE 'pv_matmul' END
             WHEN {{anchor}}.first_matmul_pos IS NULL OR {{pos}} <= {{anchor}}.first_matmul_pos THEN 'qk_matmul'
             ELSE 'pv_matmul' END
    -- Before the core's first product (or fused op): a pre-scale of q (OPT, BART) comes between the projections.
    WHEN 'proj' THEN
        CASE WHEN coalesce({{anchor}}.product_pos, {{anchor}}.core_pos) IS NULL
                  OR {{pos}} < coalesce({{anchor}}.product_pos, {{anchor}}.core_pos)
             THEN 'qkv_proj' ELSE 'out_proj' END
    WHEN 'norm' THEN
        CASE WHEN {{anchor}}.core_end_pos IS NOT NULL AND {{pos}} > {{anchor}}.core_end_pos THEN 'out_proj'
             WHEN {{anchor}}.first_proj_pos IS NOT NULL AND {{pos}} > {{anchor}}.first_proj_pos THEN 'qk_norm'
             ELSE 'pre_norm' END
    WHEN 'scale' THEN CASE WHEN {{positional}} AND {{pos}} > {{anchor}}.core_end_pos THEN 'out_proj' ELSE 'scale' END
    WHEN 'mask' THEN CASE WHEN {{positional}} AND {{pos}} > {{anchor}}.core_end_pos THEN 'out_proj' ELSE 'mask' END
    WHEN 'dropout' THEN CASE WHEN {{positional}} AND {{pos}} > {{anchor}}.core_end_pos THEN 'out_proj' ELSE 'dropout' END
    -- A rotation after the core's first product is not a rotary embedding: before the softmax it shifts the
    -- scores (mask, as an added bias does), after it nothing of attention.
    WHEN 'rotate' THEN CASE WHEN {{pos}} < {{anchor}}.softmax_pos THEN 'mask' ELSE 'other' END
    -- A reduction after the core is the output block's (MultiheadAttention averaging the probabilities over
    -- the heads for need_weights); before it, not attention.
    WHEN 'reduce' THEN CASE WHEN {{positional}} AND {{pos}} > {{anchor}}.core_end_pos THEN 'out_proj' ELSE 'other' END
    WHEN 'layout' THEN
        CASE WHEN ({{positional}} AND NOT coalesce({{nested}}, false) AND {{pos}} > {{anchor}}.rope_lo
                   AND {{pos}} < {{anchor}}.rope_hi) THEN 'rope' ELSE 'layout' END
    WHEN 'concat' THEN
        CASE WHEN ({{positional}} AND NOT coalesce({{nested}}, false) AND {{pos}} > {{anchor}}.rope_lo
                   AND {{pos}} < {{anchor}}.rope_hi) THEN 'rope'
             WHEN coalesce({{appends}}, false) AND {{pos}} < coalesce({{anchor}}.product_pos, 9e18) THEN 'kv_cache'
             ELSE 'layout' END
    ELSE {{stage}} END END
