-- One kernel dominates the GPU's work.
--
-- The GPU op name (top_kernels) whose summed duration is at least
-- min_share_pct of all counted GPU op time of the trace: the one place where
-- a faster kernel or a better shape pays the most.
--
-- @uses top_kernels
-- @param min_share_pct DOUBLE = 40   Fire at this share of GPU op time, percent.
-- @column trace VARCHAR      Trace label.
-- @column name VARCHAR       GPU op name as written.
-- @column count BIGINT       Launches.
-- @column total_ns BIGINT    Summed duration, nanoseconds.
-- @column share_pct DOUBLE   Share of the trace's GPU op time, percent.
SELECT trace, name, count, total_ns, share_pct
FROM top_kernels
WHERE share_pct >= $min_share_pct
ORDER BY trace, total_ns DESC, name;
