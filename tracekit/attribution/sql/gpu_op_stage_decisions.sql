-- gpu_op_stage_decisions: the GPU ops a rule, call or the kernel order decided (columns: docs/schema.md).
--
-- The kernel-order blocks (_kblock, attribution/kernel_block_*) override the decisions they take in; a GPU
-- op left other/none, with no call, rule or impl and not an attention kernel, has no row. Whatever path
-- took a GPU op into a projection (a RowParallelLinear module scope, a label, the kernel order's all-reduce
-- after the output GEMM, an eager block's reduction), the projection is its GEMM: a communication op
-- (gpu_op_category) there is the tensor-parallel collective (comm_stage), and a memcpy is a copy (layout).
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @param comm_stage TEXT                  The stage of tensor-parallel communication (eager.TP_COMM).
-- @reads _gpu_decisions, _kblock, gpu_ops
-- @creates gpu_op_stage_decisions
CREATE {{table}} gpu_op_stage_decisions AS
WITH d AS (
    SELECT d.id, d.trace_id, coalesce(b.stage, d.stage) AS stage, coalesce(b.source, d.source) AS source,
           coalesce(b.call_id, d.call_id) AS call_id, coalesce(b.rule, d.rule) AS rule,
           coalesce(b.attention_kernel, d.attention_kernel) AS attention_kernel, d.kernel_impl
    FROM _gpu_decisions d LEFT JOIN _kblock b USING (id)
),
-- (A projection's ops are never other/none, so the rows kept are the same before and after the buckets.)
kept AS (
    SELECT * FROM d
    WHERE NOT (stage = 'other' AND source = 'none' AND call_id IS NULL AND rule IS NULL AND kernel_impl IS NULL
               AND attention_kernel IS NOT DISTINCT FROM false)
),
-- The category, a regex macro, only for the ops in a projection (a few of every trace's ops): gpu_ops is
-- joined to those alone, not to every GPU op's decision.
buckets AS (
    SELECT k.id, gpu_op_category(g.kind, g.name) AS bucket
    FROM kept k JOIN gpu_ops g ON g.id = k.id WHERE k.stage IN ('qkv_proj', 'out_proj')
)
SELECT k.id, k.trace_id,
       CASE WHEN b.bucket = 'communication' THEN {{comm_stage}} WHEN b.bucket = 'memcpy' THEN 'layout'
            ELSE k.stage END AS stage,
       k.source, k.call_id, k.rule, k.attention_kernel, k.kernel_impl
FROM kept k LEFT JOIN buckets b ON b.id = k.id;

DROP TABLE _gpu_decisions;

DROP TABLE _kblock;
