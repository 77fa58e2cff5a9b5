-- The CPU ops whose shapes gemm_shape decodes, as a list: aten::mm, addmm, bmm, baddbmm, _scaled_mm, linear
-- and matmul. The one list of GEMM ops (gemm_calls; op_categories' GEMM row adds the matrix-vector products).
--
-- @param macro KEYWORD(MACRO|TEMP MACRO)  TEMP MACRO for one connection's own model.
-- @creates gemm_op_names
CREATE OR REPLACE {{macro}} gemm_op_names() AS (
    ['aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm', 'aten::_scaled_mm', 'aten::linear', 'aten::matmul']
);
