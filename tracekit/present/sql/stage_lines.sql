-- One slice per GPU op with an attention stage, on its stream's stage thread, as JSON event lines.
--
-- Binds $trace_id.
--
-- @fragment
-- @param stage_cat TEXT   The category of the added stage slices (export.STAGE_CAT).
-- @reads gpu_op_stages, gpu_ops, _tracekit_stage_tracks
SELECT ',' || chr(10) || '{"ph":"X","cat":' || to_json({{stage_cat}}) || ',"name":' || to_json(g.stage)
       || ',"pid":' || t.pid_json || ',"tid":' || t.tid_json
       || ',"ts":' || {{include present/microseconds col=o.ts_ns}} || ',"dur":' || {{include present/microseconds col=o.dur_ns}}
       || ',"args":' || CAST(json_object('stage', g.stage, 'source', g.source, 'call_id', g.call_id,
                                         'kernel', o.name) AS VARCHAR) || '}' AS line
FROM gpu_op_stages g
JOIN gpu_ops o ON o.id = g.id
JOIN _tracekit_stage_tracks t ON t.pid = o.pid AND t.tid = o.tid
WHERE g.trace_id = $trace_id AND g.stage <> 'other'
ORDER BY o.pid, o.tid, o.ts_ns, o.id
