-- The first event of a staged batch that is no usable trace event, in file order, and how many such its trace has.
--
-- An event is unusable when it is no JSON object, has no numeric ts (metadata aside) or an absurd one, is a
-- complete event without a numeric dur, or has a negative or absurd dur. Columns: trace_id, n, row, ph, name,
-- problem (what is wrong, in words).
--
-- @fragment
-- @param batch IDENT        The staged batch table.
-- @param max_abs_ts_ns INT  The largest |ts| a trace may hold, ns (ingest.events_table.MAX_ABS_TS_US).
-- @param max_dur_ns INT     The longest dur a trace may hold, ns (ingest.events_table.MAX_DUR_US).
SELECT trace_id, count(*) OVER (PARTITION BY trace_id) AS n, row, ph, name, problem
FROM (
    SELECT trace_id, rowid AS row, ph, name,
           CASE
               WHEN extra IS NOT NULL AND json_type(extra) <> 'OBJECT'
                   THEN 'is not a JSON object (it is ' || lower(json_type(extra)) || ')'
               WHEN ts_ns IS NULL AND ph IS DISTINCT FROM 'M' THEN 'has no numeric ''ts'' (or one out of range)'
               WHEN abs(ts_ns) > {{max_abs_ts_ns}} THEN 'has an absurd ts of ' || (ts_ns // 1000) || ' us'
               WHEN ph = 'X' AND dur_ns IS NULL THEN 'is a complete event (ph X) without a numeric ''dur'''
               WHEN dur_ns < 0 THEN 'has a negative dur of ' || (dur_ns / 1000)::DECIMAL(24, 3) || ' us'
               WHEN dur_ns > {{max_dur_ns}} THEN 'has an absurd dur of ' || (dur_ns / 1000)::DECIMAL(24, 3) || ' us'
           END AS problem
    FROM {{batch}}
)
WHERE problem IS NOT NULL ORDER BY trace_id, row LIMIT 1
