-- The GPU streams with attention work in a trace (bound as the one parameter): pid, tid, their stage ops, name and sort index.
--
-- @fragment
-- @reads gpu_op_stages, gpu_ops, threads
SELECT o.pid, o.tid, count(*) AS ops, any_value(trim(t.name)) AS name,
       coalesce(any_value(t.sort_index), min(o.stream)) AS sort_index
FROM gpu_op_stages g JOIN gpu_ops o ON o.id = g.id
LEFT JOIN threads t ON t.trace_id = o.trace_id AND t.pid = o.pid AND t.tid = o.tid
WHERE g.trace_id = ? AND g.stage <> 'other'
GROUP BY o.pid, o.tid ORDER BY o.pid, o.tid
