-- Process names, labels and sort order from metadata events.
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
-- @creates processes
CREATE VIEW processes AS
SELECT trace_id, pid,
       max(json_extract_string(args, '$.name')) FILTER (WHERE name = 'process_name') AS name,
       max(json_extract_string(args, '$.labels')) FILTER (WHERE name = 'process_labels') AS labels,
       max(TRY_CAST(json_extract(args, '$.sort_index') AS BIGINT)) FILTER (WHERE name = 'process_sort_index')
           AS sort_index
FROM metadata_events
WHERE name IN ('process_name', 'process_labels', 'process_sort_index')
GROUP BY trace_id, pid;
