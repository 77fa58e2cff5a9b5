-- Per kernel of the sequence: the nearest closed kernel and free GEMM on each side, and the nearest kernel before it that is no free GEMM.
--
-- Window aggregates over the windows up (the kernels before, on the stream) and down (the kernels after),
-- which the including query defines. Closed: not open.
--
-- @fragment
-- @param prefix IDENT    What the columns' names start with (prefix_closed_before, ...).
-- @param open IDENT      The column that says a kernel is open (a block may take it in).
-- @param gemm IDENT      The column that says a kernel is a free GEMM.
max(CASE WHEN NOT {{open}} THEN k END) OVER up AS {{prefix}}_closed_before,
max(CASE WHEN {{gemm}} THEN k END) OVER up AS {{prefix}}_gemm_before,
max(CASE WHEN NOT {{gemm}} THEN k END) OVER up AS {{prefix}}_not_gemm_before,
min(CASE WHEN NOT {{open}} THEN k END) OVER down AS {{prefix}}_closed_after,
min(CASE WHEN {{gemm}} THEN k END) OVER down AS {{prefix}}_gemm_after
