-- The containers as the sweep reads them, in axis order.
--
-- A plain scan returns _cpu in the order it was stored, which is axis order (an ORDER BY would sort again).
--
-- @fragment
-- @param kinds LIST      The container kinds.
-- @reads _cpu
SELECT id, lane, k0, k1, pos, kind = 'cpu_op' AS op, kind = 'user_annotation' AS ann,
       CASE WHEN kind = 'user_annotation' THEN name END AS name
FROM _cpu WHERE kind IN {{kinds}}
