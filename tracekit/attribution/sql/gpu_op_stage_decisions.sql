-- gpu_op_stage_decisions: the GPU ops a rule, call or the kernel order decided (columns: docs/schema.md).
--
-- The kernel-order blocks (_kblock, attribution/kernel_block_*) override the decisions they take in; a GPU
-- op left other/none, with no call, rule or impl and not an attention kernel, has no row.
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @reads _gpu_decisions, _kblock
-- @creates gpu_op_stage_decisions
CREATE {{table}} gpu_op_stage_decisions AS
SELECT * FROM (
    SELECT d.id, d.trace_id, coalesce(b.stage, d.stage) AS stage, coalesce(b.source, d.source) AS source,
           coalesce(b.call_id, d.call_id) AS call_id, coalesce(b.rule, d.rule) AS rule,
           coalesce(b.attention_kernel, d.attention_kernel) AS attention_kernel, d.kernel_impl
    FROM _gpu_decisions d LEFT JOIN _kblock b USING (id)
) WHERE NOT (stage = 'other' AND source = 'none' AND call_id IS NULL AND rule IS NULL AND kernel_impl IS NULL
             AND attention_kernel IS NOT DISTINCT FROM false);

DROP TABLE _gpu_decisions;

DROP TABLE _kblock;
