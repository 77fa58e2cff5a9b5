-- The tables and views a user sees in a database (its own and this session's TEMP ones), by name: name and type.
--
-- Working tables (names starting with _) are left out.
--
-- @fragment
SELECT table_name, min(table_type) FROM information_schema.tables
WHERE table_schema = 'main' AND table_catalog IN (current_database(), 'temp')
AND table_name NOT LIKE '\_%' ESCAPE '\' GROUP BY table_name ORDER BY table_name
