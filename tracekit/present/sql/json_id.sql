-- A pid, tid or flow id as JSON text: a number exactly when it is an integer literal (as ingest keeps it), else a string.
--
-- @fragment
-- @param col IDENT   The column.
CASE WHEN regexp_full_match({{col}}, '-?[0-9]+') THEN {{col}} ELSE to_json({{col}}) END
