-- Every CPU slice on one integer axis, threads far apart, numbered in axis order.
--
-- Lane l's slices lie at l * spread + (ts - t0): with spread larger than any trace's span, containment on
-- the axis implies the same thread, so nesting is a range join on inequalities only (an IEJoin) rather than
-- an equality key plus a range, which DuckDB plans as a hash join that takes minutes on real traces. With
-- spread 0 (too many lanes x span for 62 bits) the lane is compared explicitly instead.
-- Sorted first, then numbered in that order (a streaming row_number): a window ORDER BY would sort the wide
-- rows again in one thread. The table is stored in axis order, which the sweep reads.
--
-- @param kinds LIST      The kinds of slice nested (schema.kinds.CPU_NEST_KINDS).
-- @param spread INT      Distance between two lanes on the axis (0: lanes compared explicitly).
-- @reads slices, _lanes, _t0
-- @creates _cpu          Every nested CPU slice: id, trace_id, lane, kind, name, ts_ns, dur_ns, end_ns, k0 and k1 (its ends on the axis), pos (its number in axis order: lane, start, longer first, id).
CREATE TEMP TABLE _cpu AS
SELECT *, row_number() OVER () AS pos FROM (
    SELECT s.id, s.trace_id, l.lane, s.kind, s.name, s.ts_ns, s.dur_ns, s.end_ns,
           l.lane * {{spread}} + (s.ts_ns - t.t0) AS k0,
           l.lane * {{spread}} + (s.end_ns - t.t0) AS k1
    -- A slice without a pid or tid is a lane of its own (NULL keys are equal here: USING would drop it).
    FROM slices s
    JOIN _lanes l ON l.trace_id = s.trace_id AND l.pid IS NOT DISTINCT FROM s.pid
                 AND l.tid IS NOT DISTINCT FROM s.tid
    JOIN _t0 t ON t.trace_id = s.trace_id
    WHERE s.kind IN {{kinds}}
    ORDER BY l.lane, s.ts_ns, s.dur_ns DESC, s.id
);

DROP TABLE _lanes;

DROP TABLE _t0;
