-- Whether a decided stage is part of a rotary embedding applied by plain ops.
--
-- A scale/mask (mul, div, add) or rotate op that a generic rule decided (positional), before the call's
-- first product, in a call that rotates before it, not inside an op that is an attention call itself
-- (nested: SDPA's math backend scales q and k before its first product), not an op whose recorded inputs
-- are all below 3-D (a KV cache's position arithmetic), and not after the rotation's end (rope_end_pos:
-- attribution/call_anchors). 9e18 is a position after every position.
--
-- @fragment
-- @param stage IDENT       The decided stage.
-- @param pos IDENT         Its position.
-- @param anchor IDENT      The call's anchors row (attribution/anchors).
-- @param positional IDENT  Whether a generic op or module decided (not a label).
-- @param nested IDENT      Whether the row is inside an op that is an attention call itself.
-- @param low_rank IDENT    Whether the deciding op's recorded inputs are all below 3-D (false: not known).
-- @param rope_ops LIST     The stages a plain-op rotary embedding is made of (assign.ROPE_OPS).
({{stage}} IN {{rope_ops}} AND {{positional}} AND NOT coalesce({{nested}}, false)
 AND NOT coalesce({{low_rank}}, false) AND {{anchor}}.rotate_pos < coalesce({{anchor}}.product_pos, 9e18)
 AND {{pos}} < coalesce({{anchor}}.product_pos, 9e18) AND {{pos}} <= coalesce({{anchor}}.rope_end_pos, 9e18))
