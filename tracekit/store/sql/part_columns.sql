-- The tables of an attached database (its name bound as the one parameter) with their columns, in order.
--
-- @fragment
SELECT c.table_name, c.column_name, c.data_type FROM duckdb_columns() c
JOIN duckdb_tables() t USING (database_name, schema_name, table_name)
WHERE c.database_name = ? ORDER BY c.table_name, c.column_index
