-- (x, key, pos) for every CPU slice x (at pos) that lies inside a span of a table of spans, on its lane.
--
-- The spans table has the key column, lane and the span's ends on the axis (start, end). A slice is inside
-- when it starts within the span and ends at most bleed ns after it. _cpu is numbered (pos) in axis order,
-- lane by lane, by start: the slices that start within a span are one run of numbers, from the first slice
-- starting at or after its start to the last starting by its end (two ASOF joins, then the ends of their
-- ties). The run is joined by its numbers (an equality join) and the ends checked: the work is the pairs,
-- where an IEJoin of the spans against every slice grows with the slices.
--
-- @fragment
-- @param spans IDENT     The table of spans.
-- @param key IDENT       Its key column.
-- @param start IDENT     Its column of span starts on the axis.
-- @param end IDENT       Its column of span ends on the axis.
-- @param bleed INT       How far (ns) a slice may end after the span.
-- @reads _cpu
WITH s AS MATERIALIZED (
    SELECT {{key}} AS key, lane, {{start}} AS s0, {{end}} + {{bleed}} AS s1 FROM {{spans}}
),
lo AS (SELECT s.key, s.lane, x.k0 FROM s ASOF JOIN _cpu x ON s.lane = x.lane AND s.s0 <= x.k0),
hi AS (SELECT s.key, s.lane, x.k0 FROM s ASOF JOIN _cpu x ON s.lane = x.lane AND s.s1 >= x.k0),
-- The ends of each run: the first slice of the lo key's ties, the last of the hi key's.
lo_pos AS (SELECT lo.key, min(x.pos) AS p_lo FROM lo JOIN _cpu x USING (lane, k0) GROUP BY lo.key),
hi_pos AS (SELECT hi.key, max(x.pos) AS p_hi FROM hi JOIN _cpu x USING (lane, k0) GROUP BY hi.key),
p AS (SELECT key, unnest(range(p_lo, p_hi + 1)) AS pos FROM lo_pos JOIN hi_pos USING (key) WHERE p_lo <= p_hi)
-- (Every slice of a run is on the span's lane and starts within it: only its end is checked.)
SELECT x.id AS x, p.key, x.pos
FROM p JOIN s USING (key) JOIN _cpu x USING (pos)
WHERE x.k1 <= s.s1
