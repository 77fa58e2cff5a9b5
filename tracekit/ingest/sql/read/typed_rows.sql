-- The typed read of staged part files: each event parsed once, straight into typed columns, and _colons.
--
-- read_json skips keys its columns do not name, and nothing a user loaded may be dropped, so these rows are
-- kept only when _colons proves it skipped none (ingest.events_table._insert_typed). Each key of a JSON
-- object is followed by one ':', and staging counted the ':' bytes of the parts (StagedTrace.colons, with no
-- escaped ':'). Per event, _colons is one for each key of the spec it holds (not null) plus the ':'
-- characters in its name and args (as typed: args is JSON text, which writes a nested value's keys with one
-- ':' each; names such as aten::mm hold them too). The bytes can only be more than the sum over a trace: by
-- a key the spec does not name, a known key holding null, or a ':' in another key's value (counting every
-- key's would cost every trace time; such a trace is read exactly, which costs time, not exactness). Equal
-- sums prove no key was skipped; otherwise ingest reads the trace again with the exact read
-- (ingest/read/exact_rows), as it does when this read fails (an element that is not an object, a duplicate
-- key, a value that does not convert). Columns: part (the part file, when multi), e, extra (NULL), _colons.
--
-- The held keys below are the spec's keys, one term each (tests/test_typed_read.py checks the two agree).
--
-- @fragment
-- @param files VALUE           The part files, in file order (a list of paths).
-- @param multi BOOL            Whether the parts hold more than one trace (then each row's part is read).
-- @param spec VALUE            The event keys read into typed columns: key -> DuckDB type (scan.EVENT_SPEC).
-- @param max_event_bytes INT   The largest event the parse accepts (scan.MAX_EVENT_BYTES).
SELECT {{if multi}}filename AS part,{{endif}} e, NULL::JSON AS extra,
       (e."ph" IS NOT NULL)::BIGINT + (e."cat" IS NOT NULL)::BIGINT + (e."name" IS NOT NULL)::BIGINT
       + (e."pid" IS NOT NULL)::BIGINT + (e."tid" IS NOT NULL)::BIGINT + (e."ts" IS NOT NULL)::BIGINT
       + (e."dur" IS NOT NULL)::BIGINT + (e."id" IS NOT NULL)::BIGINT + (e."bp" IS NOT NULL)::BIGINT
       + (e."s" IS NOT NULL)::BIGINT + (e."args" IS NOT NULL)::BIGINT
       + coalesce(strlen(e."name") - strlen(replace(e."name", ':', '')), 0)
       + coalesce(strlen(e."args") - strlen(replace(e."args", ':', '')), 0) AS _colons
FROM read_json({{files}}, format = 'array', filename = {{multi}}, columns = {{spec}},
               maximum_object_size = {{max_event_bytes}}) e
