-- Threads per block of a kernel's block dimensions (gpu_ops.block, [x, y, z]; missing dimensions count 1).
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates block_threads
CREATE OR REPLACE {{macro}} block_threads(block) AS (
    block[1] * coalesce(block[2], 1) * coalesce(block[3], 1)
);
