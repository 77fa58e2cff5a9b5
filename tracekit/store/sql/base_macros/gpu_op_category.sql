-- The GPU-time bucket of a GPU op as TraceLens's GPU timeline defines it: memcpy (a memcpy, or a ROCm
-- `__amd_rocclr_copy*` blit kernel), communication (a kernel or memset that is_collective_kernel says is
-- communication: a collective library's, a custom all-reduce's), else computation (every other kernel, every
-- memset).
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates gpu_op_category
CREATE OR REPLACE {{macro}} gpu_op_category(kind, name) AS (
    CASE WHEN kind = 'memcpy' OR starts_with(name, '__amd_rocclr_copy') THEN 'memcpy'
         WHEN is_collective_kernel(name) THEN 'communication'
         ELSE 'computation' END
);
