-- Integer nanoseconds as exact microseconds text with three decimals (the file's ts and dur).
--
-- @fragment
-- @param col IDENT   The column, integer nanoseconds.
CAST(CAST({{col}} AS DECIMAL(19, 0)) * 0.001 AS VARCHAR)
