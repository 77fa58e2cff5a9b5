-- The threads of the CPU slices, each a lane, and each trace's start and span.
--
-- The first half of putting every CPU slice on one axis (model/axis): the caller reads the number of
-- lanes and the longest span (the last statement) to choose how far apart the lanes lie.
--
-- @param kinds LIST      The kinds of slice nested (schema.kinds.CPU_NEST_KINDS).
-- @reads slices
-- @creates _lanes        One row per (trace_id, pid, tid) holding nested slices: lane, numbered from 1.
-- @creates _t0           Per trace: t0 (its first nested slice's start, ns) and span (to the last end, ns).
CREATE TEMP TABLE _lanes AS
SELECT trace_id, pid, tid, row_number() OVER () AS lane
FROM (SELECT DISTINCT trace_id, pid, tid FROM slices WHERE kind IN {{kinds}});

CREATE TEMP TABLE _t0 AS
SELECT trace_id, min(ts_ns) AS t0, max(end_ns) - min(ts_ns) AS span
FROM slices WHERE kind IN {{kinds}} GROUP BY trace_id;

SELECT (SELECT count(*) FROM _lanes), (SELECT coalesce(max(span), 0) FROM _t0);
