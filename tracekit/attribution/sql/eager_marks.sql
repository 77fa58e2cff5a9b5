-- The eager calls and widened call ops as marks, and every CPU slice inside one.
--
-- An eager pattern is a call (kind eager, impl eager) when its shapes agree: the first product's output
-- [..., Sq, Skv] is the softmax's input and the second product's left operand, and the second product's
-- right operand has Skv rows; without shapes, the tightest pattern (at most unshaped_gap ops between the
-- products and the softmax) or one whose ops between are all score ops (plain). Its id is the first product's op id, its mkey the negated id (no collision
-- with the op's own mark), and it sits just before that op on the axis. A call op widened to its block gets
-- a mark that only scopes the call (kind block: no stage, not a call of its own in attention_calls): its id
-- is the op's, so the call keeps the op's id, source and impl; it sits before the block's first op, so the
-- block's ops are in the call's context. The slices inside a mark's span are model/inside's.
--
-- @param unshaped_gap INT   Ops allowed between the products and the softmax without shapes (eager.UNSHAPED_GAP).
-- @param bleed INT          How far (ns) a slice may end after a mark's span (model.link.BLEED_NS).
-- @reads _eager_found, _eager_call_ops, _eager_blocks, _cpu
-- @creates _eager_marks     The marks: id, mkey, kind (eager, block), pos, stage, is_call, impl, context, scope, causal_arg, rule, op, lane, k0, k1, ts_ns, end_ns.
-- @creates _eager_pairs     (x, mkey): every CPU slice x inside the mark mkey's span.
CREATE OR REPLACE TEMP TABLE _eager_marks AS
SELECT qk_id AS id, -qk_id AS mkey, 'eager' AS kind, (qk_pos - 0.5)::DOUBLE AS pos,
       NULL::VARCHAR AS stage, true AS is_call, 'eager' AS impl, 'any' AS context, 'outer' AS scope,
       NULL::INTEGER AS causal_arg, 'eager: matmul -> softmax -> matmul' AS rule,
       qk_name || ' > ' || sm_name || ' > ' || pv_name AS op, lane, k0, k1, ts_ns, end_ns
FROM _eager_found
WHERE CASE WHEN skv IS NULL OR a_rows IS NULL OR p_rows IS NULL
           THEN plain OR sm_i - qk_i - 1 <= {{unshaped_gap}} AND pv_i - sm_i - 1 <= {{unshaped_gap}}
           ELSE a_inner = b_inner AND b_cols = skv AND a_rows = sq
                AND p_inner = skv AND p_rows = sq AND v_rows = skv END;

INSERT INTO _eager_marks
SELECT o.id, -o.id, 'block', (w.pos - 0.5)::DOUBLE, NULL, true, NULL, 'any', 'outer', NULL,
       'block: a call op widened to its projections, head reshapes, RoPE and KV cache by shape',
       o.name, o.lane, w.k0, w.k1, w.ts_ns, w.end_ns
FROM _eager_call_ops o JOIN _eager_blocks w ON w.qk_id = o.id WHERE w.widened;

CREATE OR REPLACE TEMP TABLE _eager_pairs AS
SELECT x, key AS mkey FROM ({{include model/inside spans=_eager_marks key=mkey start=k0 end=k1 bleed=bleed}});

DROP TABLE _eager_softmax;

DROP TABLE _eager_call_ops;

DROP TABLE _eager_siblings;

DROP TABLE _eager_found;

DROP TABLE _eager_block_cores;

DROP TABLE _eager_sibling_classes;

DROP TABLE _eager_ends;

DROP TABLE _eager_blocks;

DROP TABLE _eager_lift;
