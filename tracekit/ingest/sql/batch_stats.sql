-- Per trace of the batch just copied into events: its events, first start and last end (metadata left out).
--
-- @fragment
-- @param id_base INT   The first id of the batch.
-- @reads events
SELECT trace_id, count(*), min(ts_ns) FILTER (WHERE ph IS DISTINCT FROM 'M'),
       max(end_ns) FILTER (WHERE ph IS DISTINCT FROM 'M')
FROM events WHERE id >= {{id_base}} GROUP BY trace_id
