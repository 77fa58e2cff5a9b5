-- Whether a GPU kernel is collective communication: its name contains nccl, rccl or hccl (any case: ncclKernel_*,
-- ncclDevKernel_* since NCCL 2.19, RCCL's) or cross_device_reduce (vLLM's custom all-reduce), as TraceLens's GPU
-- timeline counts communication. The one definition of a communication kernel.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates is_collective_kernel
CREATE OR REPLACE {{macro}} is_collective_kernel(name) AS (
    regexp_matches(name, '(?i)nccl|rccl|hccl|cross_device_reduce')
);
