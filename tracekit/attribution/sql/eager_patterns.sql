-- The matmul -> softmax -> matmul patterns around each softmax, with the shapes that check them.
--
-- The siblings of the softmaxes and of the call ops are numbered in order (attribution/siblings). Around
-- each softmax, by those numbers (an equality join: a range join on a parent with many children, or none,
-- is a nested loop): the nearest product before it (at most max_gap_before ops between; the nearest whose
-- shapes make the softmax's scores, when one does) and after it (at
-- most max_gap_after), with no other softmax between them. The shapes the marks check: the softmax's
-- [..., Sq, Skv], and the rows and inner dims of both products' operands; without shapes, whether every op
-- between the products is a score op (plain).
--
-- @param product TEXT          A product op's name (eager.PRODUCT).
-- @param max_gap_before INT    Sibling ops allowed between the QK^T product and the softmax (eager.MAX_GAP_BEFORE).
-- @param max_gap_after INT     Sibling ops allowed between the softmax and the PV product (eager.MAX_GAP_AFTER).
-- @param score_ops TEXT        An op that only scales, masks, biases, casts or reshapes the scores (eager.SCORE_OPS).
-- @reads cpu_slices, _cpu, _eager_softmax, _eager_call_ops
-- @creates _eager_siblings     The siblings of the softmaxes and call ops (attribution/siblings' columns).
-- @creates _eager_found        Each pattern: sm_id, sm_i, input_dims, qk_id, qk_i, pv_id, pv_i, plain, the three ops' names, lane, qk_pos, k0, k1, ts_ns, end_ns (its span), skv, sq (the softmax's), a_rows, a_inner, b_inner, b_cols (QK^T's operands), p_rows, p_inner, v_rows (PV's).
CREATE OR REPLACE TEMP TABLE _eager_siblings AS
WITH parents AS (SELECT lane, parent_id FROM _eager_softmax UNION SELECT lane, parent_id FROM _eager_call_ops)
{{include attribution/siblings parents=parents}};

CREATE OR REPLACE TEMP TABLE _eager_found AS
WITH sm AS (
    SELECT e.id, e.lane, b.i, e.input_dims, e.parent_id FROM _eager_softmax e JOIN _eager_siblings b USING (id)
),
-- The siblings around each softmax by their numbers (an equality join: a range join on a
-- parent with many children, or none, is a nested loop).
near AS (
    SELECT sm.id AS sm_id, sm.i AS sm_i, b.id, b.i,
           -- (a product whose output is the softmax's [.., Sq, Skv]: QK^T, by its shapes)
           {{include attribution/operand_dim op=b path=$[0][#-2] bias_path=$[1][#-2]}}
               = TRY_CAST(json_extract_string(sm.input_dims, '$[0][#-2]') AS BIGINT)
           AND {{include attribution/operand_dim op=b path=$[1][#-1] bias_path=$[2][#-1]}}
               = TRY_CAST(json_extract_string(sm.input_dims, '$[0][#-1]') AS BIGINT) AS fits
    FROM (SELECT sm.*, unnest(range(greatest(sm.i - ({{max_gap_before}} + 1), 1), sm.i + ({{max_gap_after}} + 2)))
                 AS j FROM sm) sm
    JOIN _eager_siblings b
      ON b.lane = sm.lane AND coalesce(b.parent_id, -1) = coalesce(sm.parent_id, -1) AND b.i = sm.j
    WHERE regexp_matches(b.name, {{product}})
),
-- The nearest product before the softmax whose shapes make the softmax's scores, else the nearest (DeBERTa
-- adds its c2p and p2c position terms, two more bmms, between QK^T and the softmax), with no other softmax
-- between.
qk AS (
    SELECT sm_id, arg_max(id, CASE WHEN fits THEN i + 1000000 ELSE i END) AS qk_id,
           arg_max(i, CASE WHEN fits THEN i + 1000000 ELSE i END) AS qk_i
    FROM near WHERE i < sm_i GROUP BY sm_id
),
pv AS (  -- the nearest product after it
    SELECT sm_id, arg_min(id, i) AS pv_id, min(i) AS pv_i FROM near WHERE i > sm_i GROUP BY sm_id
),
cand AS (
    SELECT sm.id AS sm_id, sm.i AS sm_i, sm.input_dims, qk.qk_id, qk.qk_i, pv.pv_id, pv.pv_i, sm.lane, sm.parent_id
    FROM sm JOIN qk ON qk.sm_id = sm.id JOIN pv ON pv.sm_id = sm.id
    -- (differences, not comparisons, so DuckDB plans a hash join: see attribution/gpu_labels)
    WHERE NOT EXISTS (SELECT 1 FROM sm o WHERE o.lane = sm.lane
                      AND o.parent_id IS NOT DISTINCT FROM sm.parent_id
                      AND o.i - qk.qk_i > 0 AND pv.pv_i - o.i > 0 AND o.id <> sm.id)
),
-- Whether every op between the products but the softmax only scales, masks, biases, casts or reshapes the scores
-- (by the numbers between them: an equality join).
plain AS (
    SELECT c.sm_id, bool_and(regexp_matches(b.name, {{score_ops}})) AS plain
    FROM (SELECT sm_id, lane, parent_id, unnest(range(qk_i + 1, pv_i)) AS j FROM cand) c
    JOIN _eager_siblings b ON b.lane = c.lane AND coalesce(b.parent_id, -1) = coalesce(c.parent_id, -1) AND b.i = c.j
    WHERE b.id <> c.sm_id
    GROUP BY c.sm_id
)
SELECT c.* EXCLUDE (lane, parent_id), coalesce(pl.plain, true) AS plain, a.name AS qk_name, z.name AS pv_name, n.name AS sm_name,
       a.lane, a.pos AS qk_pos, a.k0, z.k1, a.ts_ns, z.end_ns,
       TRY_CAST(json_extract_string(c.input_dims, '$[0][#-1]') AS BIGINT) AS skv,
       TRY_CAST(json_extract_string(c.input_dims, '$[0][#-2]') AS BIGINT) AS sq,
       {{include attribution/operand_dim op=a path=$[0][#-2] bias_path=$[1][#-2]}} AS a_rows,
       {{include attribution/operand_dim op=a path=$[0][#-1] bias_path=$[1][#-1]}} AS a_inner,
       {{include attribution/operand_dim op=a path=$[1][#-2] bias_path=$[2][#-2]}} AS b_inner,
       {{include attribution/operand_dim op=a path=$[1][#-1] bias_path=$[2][#-1]}} AS b_cols,
       {{include attribution/operand_dim op=z path=$[0][#-2] bias_path=$[1][#-2]}} AS p_rows,
       {{include attribution/operand_dim op=z path=$[0][#-1] bias_path=$[1][#-1]}} AS p_inner,
       {{include attribution/operand_dim op=z path=$[1][#-2] bias_path=$[2][#-2]}} AS v_rows
FROM cand c JOIN _eager_siblings a ON a.id = c.qk_id JOIN _eager_siblings z ON z.id = c.pv_id
JOIN _eager_siblings n ON n.id = c.sm_id LEFT JOIN plain pl ON pl.sm_id = c.sm_id;
