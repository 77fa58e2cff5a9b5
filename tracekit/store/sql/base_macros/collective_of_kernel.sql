-- The collective a communication kernel's name says, lower case: NCCL's and RCCL's word after Kernel_
-- (ncclDevKernel_AllReduce_Sum_f32_RING_LL -> allreduce), else the collective named anywhere in it without its
-- underscores (multimem_all_reduce_kernel -> allreduce, HcclAllReduce_f32_kernel -> allreduce), else the
-- kernel's own name without its return type and namespaces (vllm::cross_device_reduce_1stage ->
-- cross_device_reduce_1stage).
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates collective_of_kernel
CREATE OR REPLACE {{macro}} collective_of_kernel(name) AS (
    lower(coalesce(nullif(regexp_extract(name, '(?i)^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)', 1), ''),
                   nullif(replace(regexp_extract(name, '(?i)all_?reduce|reduce_?scatter|all_?gather|all_?to_?all'),
                                  '_', ''), ''),
                   regexp_extract(name, '^(?:void )?(?:\(anonymous namespace\)::|\w+::)*(\w+)', 1)))
);
