-- Exact number of input events per trace, phase and category.
--
-- Counts every event of every loaded file, whichever table it landed in
-- (slices, instants, flows, counters, metadata_events, other_events), by its
-- phase and category exactly as written in the file (cat is NULL where the
-- event has none). Summed over a trace it equals the length of the file's
-- traceEvents array: nothing is dropped on load.
--
-- @column trace VARCHAR     Trace label (file name without .json/.gz).
-- @column ph VARCHAR        Event phase as written ("X", "i", "s", "f", "M", ...).
-- @column cat VARCHAR       Event category as written (NULL when absent).
-- @column events BIGINT     Number of events.
SELECT t.trace, e.ph, e.cat, count(*) AS events
FROM events e
JOIN traces t USING (trace_id)
GROUP BY ALL
ORDER BY t.trace, e.ph NULLS LAST, e.cat NULLS LAST;
