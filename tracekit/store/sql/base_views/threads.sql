-- Thread (and GPU stream) names and sort order from metadata events.
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
-- @creates threads
CREATE VIEW threads AS
SELECT trace_id, pid, tid,
       max(json_extract_string(args, '$.name')) FILTER (WHERE name = 'thread_name') AS name,
       max(TRY_CAST(json_extract(args, '$.sort_index') AS BIGINT)) FILTER (WHERE name = 'thread_sort_index')
           AS sort_index
FROM metadata_events
WHERE name IN ('thread_name', 'thread_sort_index')
GROUP BY trace_id, pid, tid;
