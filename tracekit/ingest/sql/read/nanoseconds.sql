-- DECIMAL(24,3) microseconds as BIGINT nanoseconds, exactly (NULL when out of range), mostly by int64 arithmetic.
--
-- Microseconds as DECIMAL(15,3) (|us| < 10^12, 11.6 days) are exact int64 nanoseconds by int64 arithmetic;
-- the DECIMAL(24,3) that ts and dur are read as is a 128-bit integer, and multiplying and casting that costs
-- many times the CPU. So a value within 10^12 us of a center c (a multiple of 10^11 us, at most 9 * 10^15 us
-- in size: scan.ts_centers) or of 0 takes the short path: us - c is exact, fits DECIMAL(15,3) or is NULL
-- (TRY_CAST), times 1000 it is the integer nanoseconds of us - c as DECIMAL(18,3) (no overflow below
-- 10^15), and c * 1000 plus that fits an int64. A value no center takes is converted by the 128-bit
-- expression (coalesce evaluates it only for those rows). Which centers only decides how many rows take the
-- short path, never a value. A NULL center is no center: DuckDB folds its term away when it binds the query.
--
-- @fragment
-- @param us IDENT      The DECIMAL(24,3) microseconds.
-- @param c1 VALUE      A center (integer microseconds), or NULL.
-- @param c2 VALUE      A second center, or NULL.
-- @param c3 VALUE      A third center, or NULL.
coalesce(({{c1}} * 1000 + CAST(TRY_CAST({{us}} - {{c1}} AS DECIMAL(15,3)) * 1000 AS BIGINT)),
         ({{c2}} * 1000 + CAST(TRY_CAST({{us}} - {{c2}} AS DECIMAL(15,3)) * 1000 AS BIGINT)),
         ({{c3}} * 1000 + CAST(TRY_CAST({{us}} - {{c3}} AS DECIMAL(15,3)) * 1000 AS BIGINT)),
         CAST(TRY_CAST({{us}} AS DECIMAL(15,3)) * 1000 AS BIGINT),
         TRY_CAST({{us}} * 1000 AS BIGINT))
