-- Kernels per trace and name: kernel_totals(include_orphans) gives trace_id, name, gpu_ops (launches) and total_ns
-- (summed duration); orphans count when include_orphans is true.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates kernel_totals
CREATE OR REPLACE {{macro}} kernel_totals(include_orphans) AS TABLE
SELECT trace_id, name, count(*) AS gpu_ops, sum(dur_ns)::BIGINT AS total_ns
FROM gpu_ops
WHERE kind = 'kernel' AND (include_orphans OR NOT orphan)
GROUP BY trace_id, name;
