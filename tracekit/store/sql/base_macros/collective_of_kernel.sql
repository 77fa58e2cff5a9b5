-- The collective a communication kernel's name says (ncclDevKernel_AllReduce_Sum_f32_RING_LL -> allreduce), lower
-- case; the name's first word when it says none.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates collective_of_kernel
CREATE OR REPLACE {{macro}} collective_of_kernel(name) AS (
    lower(coalesce(nullif(regexp_extract(name, '(?i)^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)', 1), ''), regexp_extract(name, '^[A-Za-z_]+')))
);
