-- Cores nested in wrapper ops, read among the wrapper's siblings.
--
-- flex_attention called from eager code compiles itself: its core (matmul, softmax, matmul) runs inside
-- FlexAttentionAutogradOp inside a "Torch-Compiled Region", and the layer's projections and rotary embedding
-- are that region's siblings, not the core's; a custom op can wrap an SDPA op the same way. Each core (an
-- eager pattern or a call op) is lifted through the CPU ops above it whose subtree holds no other core (a
-- softmax or call op outside every call), no projection (an op a rule names proj) and no product (matmul,
-- bmm, ...) outside the core's span, up to the first that does, a slice that is not a CPU op (ProfilerStep's
-- annotation) or the thread's top: its block is then read among the siblings of the outermost such wrapper,
-- whose span it takes (attribution/eager_block_classes). An op that wraps its own projections around the
-- core (x @ W.T, bmm, softmax, bmm, x @ W.T) is not lifted to.
--
-- @param product TEXT   A product op's name (eager.PRODUCT).
-- @reads cpu_slices, _cpu, _eager_found, _eager_softmax, _eager_call_ops, _eager_siblings, _op_match
-- @creates _eager_lift      Per lifted core (core_id: a pattern's qk_id or a call op's id): id (the wrapper it is read as), lane, parent_id (the wrapper's).
-- @creates _eager_siblings  Extended: the siblings of the wrappers not yet in it.
CREATE OR REPLACE TEMP TABLE _eager_lift AS
WITH RECURSIVE cores AS (
    SELECT f.qk_id AS core_id, s.parent_id, f.k0, f.k1 FROM _eager_found f JOIN _eager_siblings s ON s.id = f.qk_id
    UNION ALL
    SELECT o.id, o.parent_id, c.k0, c.k1 FROM _eager_call_ops o JOIN _cpu c USING (id)
),
up(core_id, id, parent_id, lvl) AS (
    SELECT c.core_id, p.id, p.parent_id, 1 FROM cores c JOIN cpu_slices p ON p.id = c.parent_id
    WHERE p.kind = 'cpu_op'
    UNION ALL
    SELECT u.core_id, p.id, p.parent_id, u.lvl + 1 FROM up u JOIN cpu_slices p ON p.id = u.parent_id
    WHERE p.kind = 'cpu_op'
),
cand AS MATERIALIZED (SELECT DISTINCT u.id, c.lane, c.k0, c.k1 FROM up u JOIN _cpu c USING (id)),
markers AS (SELECT id FROM _eager_softmax UNION SELECT id FROM _eager_call_ops),
inside AS ({{include model/inside spans=cand key=id start=k0 end=k1 bleed=0}}),
-- What each wrapper holds besides its core: other cores, projections, and products outside the core's span
-- (an op that wraps x @ W.T around bmm, softmax, bmm holds its own projections: it is not lifted to).
counts AS (
    SELECT u.core_id, u.id, count(m.id) AS cores,
           count(*) FILTER (WHERE om.m.stage = 'proj' OR (x.k1 <= k.k0 OR x.k0 >= k.k1)
                                                          AND regexp_matches(s.name, {{product}})) AS projs
    FROM up u JOIN cores k USING (core_id) JOIN inside i ON i.key = u.id JOIN cand c ON c.id = u.id
    JOIN _cpu x ON x.id = i.x JOIN cpu_slices s ON s.id = i.x
    LEFT JOIN markers m ON m.id = i.x LEFT JOIN _op_match om ON om.name = s.name
    -- (a slice starting right at the wrapper's end is its next sibling)
    WHERE x.k0 < c.k1 OR x.id = c.id
    GROUP BY u.core_id, u.id
),
fit AS (
    SELECT u.core_id, u.id, u.parent_id, u.lvl, coalesce(n.cores = 1 AND n.projs = 0, false) AS fits
    FROM up u LEFT JOIN counts n USING (core_id, id)
),
top AS (
    SELECT core_id, coalesce(min(lvl) FILTER (WHERE NOT fits), max(lvl) + 1) - 1 AS lvl FROM fit GROUP BY core_id
)
SELECT f.core_id, f.id, c.lane, f.parent_id
FROM fit f JOIN top t USING (core_id, lvl) JOIN _cpu c USING (id);

INSERT INTO _eager_siblings
WITH parents AS (
    SELECT DISTINCT lane, parent_id FROM _eager_lift
    WHERE (lane, coalesce(parent_id, -1)) NOT IN (SELECT DISTINCT lane, coalesce(parent_id, -1) FROM _eager_siblings)
)
{{include attribution/siblings parents=parents}};
