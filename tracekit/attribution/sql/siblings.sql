-- The CPU ops that share a thread and a parent with a row of parents, numbered among their siblings in axis order (i).
--
-- Ops near each other are then found by their numbers: an equality join, where a range join on a parent
-- with many children would be a nested loop. Columns: id, lane, parent_id, name, input_dims, ts_ns, end_ns,
-- pos, k0, k1, i (a caller that reads fewer leaves the rest unread: DuckDB does not carry them).
--
-- @fragment
-- @param parents IDENT   The table or CTE of (lane, parent_id) whose ops' siblings are wanted.
-- @reads cpu_slices, _cpu
SELECT s.id, c.lane, s.parent_id, s.name, s.input_dims, s.ts_ns, s.end_ns, c.pos, c.k0, c.k1,
       row_number() OVER (PARTITION BY c.lane, s.parent_id ORDER BY c.pos) AS i
FROM cpu_slices s JOIN _cpu c USING (id)
WHERE s.kind = 'cpu_op'
  AND (c.lane, coalesce(s.parent_id, -1)) IN (SELECT lane, coalesce(parent_id, -1) FROM {{parents}})
