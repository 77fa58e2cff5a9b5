-- Whether a GPU kernel is collective communication, the one definition of a communication kernel. Its name
-- says a collective library (nccl, rccl, hccl, msccl, any case: ncclKernel_*, ncclDevKernel_* since NCCL 2.19,
-- RCCL's, MSCCL++, nvshmem, DeepEP's deep_ep::, TransformerEngine's userbuffers), a custom all-reduce (vLLM's,
-- SGLang's and aiter's cross_device_reduce_1stage/2stage, torch symmetric memory's multimem_* and
-- one_shot/two_shot_all_reduce, TensorRT-LLM's and FlashInfer's allreduce_fusion_kernel and its lamport
-- buffers) or a collective (all_reduce, allreduce, reduce_scatter, all_gather, all_to_all, any case). Inductor's
-- kernels (triton_poi/red/per/tem_fused_<ops>) are named after the aten ops they fuse and never communicate,
-- whatever those names are; a reduction (reduce_kernel, splitKreduce_kernel, cub::DeviceReduce) is computation.
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates is_collective_kernel
CREATE OR REPLACE {{macro}} is_collective_kernel(name) AS (
    regexp_matches(name, '(?i)nccl|rccl|hccl|msccl|nvshmem|deep_ep::|userbuffers|cross_device_reduce|multimem|lamport|all_?reduce|reduce_?scatter|all_?gather|all_?to_?all')
    AND NOT regexp_matches(name, '^triton_(poi|red|per|tem)_')
);
