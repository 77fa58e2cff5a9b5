-- The runtime calls' parents and stacks, and _nest, on the range join's path (the sweep makes _nest itself).
--
-- A call's parent is the innermost container that encloses it: the last container opened before it on its
-- lane (an ASOF join), or one of that container's ancestors when the last one has already closed. A call
-- inherits its parent's stack, the parent included. _nest then holds every CPU slice's stack and children in
-- _cpu's order, as the sweep gives it.
--
-- @param launch_kinds LIST  The kinds of runtime/driver call (schema.kinds.LAUNCH_KINDS).
-- @param bleed INT          How far (ns) a call may end after its parent.
-- @reads _cpu, _cont, _anc, _cstack
-- @scratch _prev          Each call and the last container opened before it on its lane (x).
-- @scratch _lparent       Each call with a parent: parent_id, whether the parent is an op or an annotation, its name.
-- @creates _lstack          Per call with a parent: depth, parent_id, root_id, op_id, top_op_id, annotation_id, annotation_ids, annotations.
-- @creates _nest            Every CPU slice in _cpu's order: id, depth, parent_id, root_id, op_id, top_op_id, annotation_id, annotation_ids, annotations, children, child_ns (ns of it its children cover).
CREATE TEMP TABLE _prev AS
SELECT l.id, l.ts_ns AS c_ts, l.end_ns AS c_end, l.pos AS c_pos, c.id AS x
FROM (SELECT * FROM _cpu WHERE kind IN {{launch_kinds}}) l
ASOF JOIN _cont c ON l.lane = c.lane AND c.pos < l.pos;

CREATE TEMP TABLE _lparent AS
SELECT l.id, l.parent_id, p.kind = 'cpu_op' AS parent_op, p.kind = 'user_annotation' AS parent_annotation,
       p.name AS parent_name
FROM (
    SELECT id, arg_max(aid, a_pos) AS parent_id
    FROM (
        SELECT p.id, p.c_ts, p.c_end, c.id AS aid, c.pos AS a_pos, c.end_ns AS a_end
        FROM _prev p JOIN _cont c ON c.id = p.x
        UNION ALL
        SELECT p.id, p.c_ts, p.c_end, a.aid, a.a_pos, a.a_end
        FROM _prev p JOIN _anc a ON a.id = p.x
    )
    WHERE a_end > c_ts AND a_end >= c_end - {{bleed}}
    GROUP BY id
) l JOIN _cont p ON p.id = l.parent_id;

DROP TABLE _prev;

DROP TABLE IF EXISTS _cont;

CREATE TEMP TABLE _lstack AS
SELECT l.id, coalesce(s.depth, 0) + 1 AS depth, l.parent_id,
       coalesce(s.root_id, l.parent_id) AS root_id,
       CASE WHEN l.parent_op THEN l.parent_id ELSE s.op_id END AS op_id,
       coalesce(s.top_op_id, CASE WHEN l.parent_op THEN l.parent_id END) AS top_op_id,
       CASE WHEN l.parent_annotation THEN l.parent_id ELSE s.annotation_id END AS annotation_id,
       CASE WHEN l.parent_annotation THEN list_append(coalesce(s.annotation_ids, []), l.parent_id)
            ELSE s.annotation_ids END AS annotation_ids,
       CASE WHEN l.parent_annotation THEN list_append(coalesce(s.annotations, []), l.parent_name)
            ELSE s.annotations END AS annotations
FROM _lparent l LEFT JOIN _cstack s ON s.id = l.parent_id;

DROP TABLE _lparent;

CREATE TEMP TABLE _nest AS
WITH st AS (SELECT * FROM _cstack UNION ALL SELECT * FROM _lstack),
ch AS (
    SELECT s.parent_id AS id, count(*) AS children,
           sum(least(c.end_ns, p.end_ns) - greatest(c.ts_ns, p.ts_ns)) AS child_ns
    FROM st s JOIN _cpu c ON c.id = s.id JOIN _cpu p ON p.id = s.parent_id
    GROUP BY s.parent_id
)
SELECT c.id, coalesce(st.depth, 0)::INTEGER AS depth, st.parent_id, coalesce(st.root_id, c.id) AS root_id,
       st.op_id, st.top_op_id, st.annotation_id, coalesce(st.annotation_ids, []) AS annotation_ids,
       coalesce(st.annotations, []) AS annotations, coalesce(ch.children, 0)::INTEGER AS children,
       coalesce(ch.child_ns, 0)::BIGINT AS child_ns
FROM _cpu c LEFT JOIN st USING (id) LEFT JOIN ch USING (id)
ORDER BY c.pos;
