-- Per CPU call, the positions its decided stages are resolved by (attribution/anchors), with a plain-op rotary embedding's span.
--
-- A rotary embedding applied by plain ops (attribution/rope_candidate) changes the anchors: where it ends
-- (rope_end_pos), the span of its ops (rope_lo, rope_hi), and core_pos without them (its muls are not the
-- core's scale). A call that does not rotate keeps its core_pos.
--
-- @param core LIST         The core's stages: matmul and assign.CORE_STAGES.
-- @param products LIST     The core's products (assign.PRODUCTS).
-- @param rope_ops LIST     The stages a plain-op rotary embedding is made of (assign.ROPE_OPS).
-- @reads _slice_stages
-- @creates _call_anchors   Per call: call_id, softmax_pos, first_matmul_pos, core_pos, product_pos, core_end_pos, first_proj_pos, rotate_pos, rope_end_pos, rope_lo, rope_hi.
CREATE OR REPLACE TEMP TABLE _call_anchors AS
SELECT call_id, {{include attribution/anchors stage=d.stage pos=d.pos low_rank=d.low_rank core=core products=products}}
FROM _slice_stages WHERE call_id IS NOT NULL GROUP BY call_id;

-- Where a plain-op rotary embedding ends: three scale/mask ops after its last rotation before the core's first
-- product (rotate_half's `* sin` and `+`, GPT-J's the same; DeepSeek's `x2 * cos + x1 * sin` after the
-- `x1 * cos - x2 * sin` of its sub; Meta's complex form none), or the last rotation itself. A mask made after
-- it, before the core (flex_attention's block mask: ones, where), is not the rotation's; with shapes it was
-- told apart by its rank, without them by this. NULL: the call does not rotate.
CREATE OR REPLACE TEMP TABLE _call_anchors AS
WITH rot AS (
    SELECT x.call_id, max(x.d.pos) AS last_rot, any_value(a.product_pos) AS product_pos
    FROM _slice_stages x JOIN _call_anchors a USING (call_id)
    WHERE x.d.stage = 'rotate' AND NOT coalesce(x.d.low_rank, false) AND x.d.pos < coalesce(a.product_pos, 9e18)
    GROUP BY x.call_id
),
after AS (
    SELECT r.call_id, r.last_rot, x.d.pos AS pos, dense_rank() OVER (PARTITION BY r.call_id ORDER BY x.d.pos) AS k
    FROM rot r LEFT JOIN _slice_stages x
      ON x.call_id = r.call_id AND x.d.stage IN {{rope_ops}} AND x.d.stage <> 'rotate'
     AND x.d.pos - r.last_rot > 0 AND coalesce(r.product_pos, 9e18) - x.d.pos > 0
)
SELECT a.*, e.rope_end_pos
FROM _call_anchors a LEFT JOIN (
    SELECT call_id, greatest(any_value(last_rot), max(pos) FILTER (WHERE k <= 3)) AS rope_end_pos
    FROM after GROUP BY call_id
) e USING (call_id);

CREATE OR REPLACE TEMP TABLE _call_anchors AS
-- A call that does not rotate has no row in r, and keeps its core_pos.
SELECT a.* REPLACE (CASE WHEN r.call_id IS NULL THEN a.core_pos ELSE r.core_pos END AS core_pos),
       r.rope_lo, r.rope_hi
FROM _call_anchors a LEFT JOIN (
    SELECT x.call_id,
           min(x.d.pos) FILTER (WHERE {{include attribution/rope_candidate stage=x.d.stage pos=x.d.pos anchor=a positional=x.positional nested=x.in_call_op low_rank=x.d.low_rank rope_ops=rope_ops}}) AS rope_lo,
           max(x.d.pos) FILTER (WHERE {{include attribution/rope_candidate stage=x.d.stage pos=x.d.pos anchor=a positional=x.positional nested=x.in_call_op low_rank=x.d.low_rank rope_ops=rope_ops}}) AS rope_hi,
           min(x.d.pos) FILTER (WHERE x.d.stage IN {{core}} AND NOT {{include attribution/rope_candidate stage=x.d.stage pos=x.d.pos anchor=a positional=x.positional nested=x.in_call_op low_rank=x.d.low_rank rope_ops=rope_ops}}) AS core_pos
    FROM (SELECT *, source IN ('op', 'module') AS positional FROM _slice_stages) x
    JOIN _call_anchors a ON a.call_id = x.call_id
    WHERE a.rotate_pos IS NOT NULL GROUP BY x.call_id
) r ON r.call_id = a.call_id;
