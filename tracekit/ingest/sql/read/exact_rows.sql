-- The exact read of staged part files: each event read as JSON text, typed, and its keys checked.
--
-- An event with a key the spec does not name, or an element that is not an object, is kept whole in extra:
-- nothing a user loaded is dropped. Slower than the typed read (ingest/read/typed_rows), three parses of
-- each event, but right whatever the input. Columns: part (the part file, when multi), e (the spec's keys,
-- typed), extra.
--
-- @fragment
-- @param files VALUE           The part files, in file order (a list of paths).
-- @param multi BOOL            Whether the parts hold more than one trace (then each row's part is read).
-- @param spec VALUE            The event keys read into typed columns: key -> DuckDB type (scan.EVENT_SPEC).
-- @param keys LIST             The same keys: an event with any other goes into extra.
-- @param max_event_bytes INT   The largest event the parse accepts (scan.MAX_EVENT_BYTES).
SELECT {{if multi}}filename AS part,{{endif}}
       json_transform(json, {{spec}}::JSON) AS e,
       -- Objects start with an opening brace (the reader trims them): a check on the
       -- text, not another parse (json_type parses every event again).
       CASE WHEN NOT starts_with(json, '{')
                 OR list_bool_or(list_transform(json_keys(json), lambda k: k NOT IN {{keys}}))
            THEN json END AS extra
FROM read_json_objects({{files}}, format = 'array', filename = {{multi}},
                       maximum_object_size = {{max_event_bytes}})
