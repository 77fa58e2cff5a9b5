-- Every kernel name with its precision class and the rule that decided it.
--
-- The row-level view behind kernel_precision: one row per trace and kernel
-- name (kind = 'kernel'; memcpys and memsets are no kernels). precision is
-- tensor_core (MMA on tensor cores / AMD matrix cores, fused attention
-- included), fp32_simt (FP32 matrix math on CUDA cores: sgemm, ffma xmma,
-- scudnn, FP32 gemv) or other. It comes from the first row of
-- rule_kernel_precision, by rule_order, whose RE2 pattern matches the name;
-- rule, rule_note and rule_order name that row (join rule_kernel_precision
-- on rule_order for its file) and are NULL when no row matches (precision
-- other). Rows of a user rule folder (--rules, $TRACEKIT_RULES_PATH) come
-- first and so win. By default kernels with no launch in the trace (orphans)
-- are left out.
--
-- @param include_orphans BOOLEAN = false   Also count kernels launched before the trace began.
-- @column trace VARCHAR        Trace label.
-- @column name VARCHAR         Kernel name as written.
-- @column precision VARCHAR    tensor_core, fp32_simt or other.
-- @column rule VARCHAR         Pattern of the deciding rule_kernel_precision row (NULL: none matched).
-- @column rule_note VARCHAR    That row's note: why the pattern means this class.
-- @column rule_order INTEGER   The row's rule_order (lower wins; user folders' rows come first).
-- @column gpu_ops BIGINT       Kernels of this name.
-- @column total_ns BIGINT      Summed duration, nanoseconds.
-- @column share_pct DOUBLE     100 * total_ns / summed duration of all counted kernels of the trace.
WITH names AS (
    SELECT * FROM kernel_totals($include_orphans)
)
SELECT t.trace, n.name, f.precision,
       f.rule, f.rule_note, f.rule_order,
       n.gpu_ops, n.total_ns,
       round(100.0 * n.total_ns / sum(n.total_ns) OVER (PARTITION BY n.trace_id), 3) AS share_pct
FROM names n
JOIN traces t USING (trace_id)
JOIN kernel_precision_classes f USING (name)
ORDER BY t.trace, n.total_ns DESC, n.name;
