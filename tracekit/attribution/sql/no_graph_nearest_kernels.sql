-- No bounds for a CPU call's block (graph_closed_before, ... all NULL): there is no such call.
--
-- Computing them costs five more window aggregates over the sequence; a trace with no CPU call that a
-- block may widen never reads them.
--
-- @fragment
NULL::BIGINT AS graph_closed_before, NULL::BIGINT AS graph_gemm_before, NULL::BIGINT AS graph_not_gemm_before,
NULL::BIGINT AS graph_closed_after, NULL::BIGINT AS graph_gemm_after
