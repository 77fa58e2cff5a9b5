-- The ops of each RMSNorm written in plain ops inside an attention call, marked as stage norm (scope inner).
--
-- An RMSNorm in plain ops (Hugging Face's Qwen3, Gemma 3, OLMo-2 q_norm and k_norm, DeepSeek's latent
-- norms): x.to(float32), pow(2), mean, + eps, rsqrt, x * that, .to(dtype), * weight (Gemma: * (1 + weight)).
-- Its ops are the ops of that kind (norm_ops) around an aten::rsqrt in a call (not inside an op that is a
-- call itself), within reach of it, up to the first op of another kind on either side. Marked norm, their
-- op rules' scale / mask / layout give way: by position a norm between the projections and the core is
-- qk_norm, one before them pre_norm, one after the core out_proj; and its multiplies no longer pass for a
-- rotary embedding's. The marks cover each op, what it calls and the runtime calls they make.
--
-- @param norm_ops TEXT    The ops an RMSNorm is written in (eager.NORM_OPS).
-- @param reach INT        How far from its rsqrt a norm's op may sit (assign.NORM_REACH).
-- @param rule TEXT        The marks' rule (assign.NORM_RULE).
-- @reads cpu_slices, _cpu, _anc, _slice_calls
-- @scratch _norm_ops      The ops of the norms: id, pos.
-- @creates _marked        Rows added: the norms' ops (mkey: the negated id).
-- @creates _slice_marks   Rows added: the slices they cover.
CREATE OR REPLACE TEMP TABLE _norm_ops AS
WITH r AS (  -- each rsqrt in a call, not inside an op that is a call itself
    SELECT s.id, s.parent_id, c.lane FROM cpu_slices s JOIN _cpu c USING (id) JOIN _slice_calls x ON x.x = s.id
    WHERE s.kind = 'cpu_op' AND s.name = 'aten::rsqrt' AND NOT x.in_call_op
),
sib AS (
    SELECT id, lane, parent_id, pos, i, regexp_matches(name, {{norm_ops}}) AS normish
    FROM ({{include attribution/siblings parents=r}})
),
-- The siblings within reach of each rsqrt (its id: rid), and the nearest of another kind on either side.
near AS (
    SELECT a.id AS rid, a.i AS ri, b.id, b.pos, b.i,
           max(CASE WHEN b.i < a.i AND NOT b.normish THEN b.i END) OVER (PARTITION BY a.id) AS lo,
           min(CASE WHEN b.i > a.i AND NOT b.normish THEN b.i END) OVER (PARTITION BY a.id) AS hi
    FROM (SELECT a.*, unnest(range(a.i - {{reach}}, a.i + ({{reach}} + 1))) AS j
          FROM r JOIN sib a USING (id)) a
    JOIN sib b ON b.lane = a.lane AND coalesce(b.parent_id, -1) = coalesce(a.parent_id, -1) AND b.i = a.j
)
SELECT DISTINCT id, pos FROM near WHERE i > coalesce(lo, -1) AND i < coalesce(hi, 9e18);

INSERT INTO _marked
SELECT id, -id, 'cpu_op', pos::DOUBLE, 'norm', false, NULL, 'call', 'inner', NULL, {{rule}}
FROM _norm_ops;

INSERT INTO _slice_marks
WITH cm AS (
    SELECT id, -id AS mkey FROM _norm_ops
    UNION ALL SELECT a.id, -a.aid FROM _anc a JOIN _norm_ops n ON n.id = a.aid
)
SELECT id, mkey FROM cm
UNION ALL
SELECT s.id, cm.mkey FROM cpu_slices s JOIN cm ON cm.id = s.parent_id WHERE s.kind IN ('runtime', 'driver');

DROP TABLE _norm_ops;
