-- The events of staged part files as rows of the events table's raw columns, in file order.
--
-- A reader's SELECT (ingest.formats): trace_id, ph, cat, name, pid, tid, ts_ns, dur_ns, end_ns, flow_id,
-- bp, scope, correlation, external_id, args and extra (and _colons, from the typed read). kind, id and ordinal
-- are filled when the rows are copied into events (ingest/copy_events). The events come from one of two
-- reads of the parts: the typed one (ingest/read/typed_rows: one parse per event, exact only when its
-- _colons prove it) or the exact one (ingest/read/exact_rows).
--
-- The trace comes from the part file's name (t<trace_id>.<n>.json) rather than a join, which keeps DuckDB's
-- parallel scan order-preserving; when the parts hold one trace it is a constant, and no file name is read.
-- ts and dur are converted to exact nanoseconds (ingest/read/nanoseconds), ts by the centers staging sampled.
-- The legacy args key "external id" is looked up only when the bytes may hold it: else external_id is
-- "External id" alone.
--
-- @fragment
-- @param typed BOOL            The typed read (with _colons), not the exact one.
-- @param files VALUE           The part files, in file order (a list of paths).
-- @param multi BOOL            Whether the parts hold more than one trace.
-- @param trace_id INT          The trace of the parts, when they hold one (not multi).
-- @param spec VALUE            The event keys read into typed columns: key -> DuckDB type (scan.EVENT_SPEC).
-- @param keys LIST             The same keys (the exact read checks each event's keys against them).
-- @param max_event_bytes INT   The largest event the parse accepts (scan.MAX_EVENT_BYTES).
-- @param c1 VALUE              A center of ts, integer microseconds (scan.ts_centers), or NULL: none.
-- @param c2 VALUE              A second center, or NULL.
-- @param c3 VALUE              A third center, or NULL.
-- @param legacy_ids BOOL       Whether args may hold the legacy key "external id" (StagedTrace.legacy_ids).
-- @param args_spec TEXT        The typed args fields read (schema.fields.EVENT), as a json_transform spec.
SELECT {{if multi}}CAST(regexp_extract(part, '/t(\d+)\.[^/]*$', 1) AS INTEGER){{else}}{{trace_id}}::INTEGER{{endif}} AS trace_id,
       e.ph, e.cat, e.name, e.pid, e.tid,
       ts_ns, dur_ns, ts_ns + coalesce(dur_ns, 0) AS end_ns,
       e.id AS flow_id, e.bp, e.s AS scope,
       a.correlation,
       coalesce(a."External id"{{if legacy_ids}},
                CASE WHEN contains(CAST(e.args AS VARCHAR), '"external id"')
                     THEN TRY_CAST(json_extract_string(e.args, '$."external id"') AS BIGINT) END{{endif}}) AS external_id,
       e.args, extra{{if typed}}, _colons{{endif}}
FROM (
    SELECT {{if multi}}part,{{endif}} e, extra{{if typed}}, _colons{{endif}},
           {{include ingest/read/nanoseconds us=e.ts c1=c1 c2=c2 c3=c3}} AS ts_ns,
           {{include ingest/read/nanoseconds us=e.dur c1=NULL c2=NULL c3=NULL}} AS dur_ns,
           CASE WHEN e.args IS NOT NULL THEN json_transform(e.args, {{args_spec}}) END AS a
    FROM ({{if typed}}{{include ingest/read/typed_rows files=files multi=multi spec=spec max_event_bytes=max_event_bytes}}{{else}}{{include ingest/read/exact_rows files=files multi=multi spec=spec keys=keys max_event_bytes=max_event_bytes}}{{endif}})
)
