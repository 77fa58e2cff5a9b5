-- Every original event of a trace as its JSON text, prefixed by the separator from the event before it.
--
-- Keys absent from the file are NULL and drop out of concat; an event kept whole (extra) is written as it
-- was read. Binds $trace_id and the ordinal range [$lo, $hi).
--
-- @fragment
-- @reads events
SELECT CASE WHEN ordinal = 0 THEN '' ELSE ',' || chr(10) END ||
       CASE WHEN extra IS NOT NULL THEN CAST(extra AS VARCHAR)
            ELSE '{' || substr(concat(
                ',"ph":' || to_json(ph), ',"cat":' || to_json(cat), ',"name":' || to_json(name),
                ',"pid":' || {{include present/json_id col=pid}}, ',"tid":' || {{include present/json_id col=tid}},
                ',"ts":' || {{include present/microseconds col=ts_ns}}, ',"dur":' || {{include present/microseconds col=dur_ns}},
                ',"id":' || {{include present/json_id col=flow_id}}, ',"bp":' || to_json(bp), ',"s":' || to_json(scope),
                ',"args":' || CAST(args AS VARCHAR)), 2) || '}'
       END AS line
FROM events
WHERE trace_id = $trace_id AND ordinal >= $lo AND ordinal < $hi
ORDER BY ordinal
