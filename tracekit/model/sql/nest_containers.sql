-- Every (container, enclosing container) pair by a range join, and each container's stack.
--
-- An ancestor is an earlier-opened container of the same lane, still open at the container's start, that
-- ends at most bleed ns before it ends. The join holds only the two inequalities on the axis: given more,
-- DuckDB may pick other ones for the IEJoin and run hundreds of times slower. Among enclosing containers
-- the innermost is the one opened last (the largest a_pos).
--
-- @param bleed INT       How far (ns) a child may end after its parent (clock skew between callbacks).
-- @param same_lane KEYWORD(|AND a.lane = c.lane)  The lane comparison, needed only when lanes share the axis (spread 0).
-- @reads _cont
-- @scratch _pairs        Every (container, enclosing container) pair the range join gives, before the ordering check.
-- @creates _anc          Container ancestors: id, aid (the ancestor), akind, aname, a_pos, a_end.
-- @creates _cstack       Per nested container: depth, parent_id, root_id, op_id and top_op_id (innermost and outermost cpu_op), annotation_id (innermost), annotation_ids and annotations (outermost first).
CREATE TEMP TABLE _pairs AS
SELECT c.id, c.ts_ns AS c_ts, c.end_ns AS c_end, c.pos AS c_pos,
       a.id AS aid, a.kind AS akind, a.name AS aname, a.pos AS a_pos, a.end_ns AS a_end
FROM _cont c JOIN _cont a ON a.k0 <= c.k0 AND a.k1 >= c.k1 - {{bleed}} {{same_lane}};

CREATE TEMP TABLE _anc AS
SELECT id, aid, akind, aname, a_pos, a_end FROM _pairs
WHERE a_pos < c_pos AND a_end > c_ts AND a_end >= c_end - {{bleed}};

DROP TABLE _pairs;

CREATE TEMP TABLE _cstack AS
SELECT id, count(*) AS depth,
       arg_max(aid, a_pos) AS parent_id,
       arg_min(aid, a_pos) AS root_id,
       arg_max(aid, a_pos) FILTER (WHERE akind = 'cpu_op') AS op_id,
       arg_min(aid, a_pos) FILTER (WHERE akind = 'cpu_op') AS top_op_id,
       arg_max(aid, a_pos) FILTER (WHERE akind = 'user_annotation') AS annotation_id,
       list(aid ORDER BY a_pos) FILTER (WHERE akind = 'user_annotation') AS annotation_ids,
       list(aname ORDER BY a_pos) FILTER (WHERE akind = 'user_annotation') AS annotations
FROM _anc GROUP BY id;
