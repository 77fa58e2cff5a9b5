-- Per kernel of the sequence: the nearest kernels that bound a CPU call's block (graph_closed_before, ...).
--
-- As attribution/nearest_kernels, over what a CPU call's block may take in (gopen, gfree_gemm: kernels of
-- graph replays only).
--
-- @fragment
{{include attribution/nearest_kernels prefix=graph open=gopen gemm=gfree_gemm}}
