-- Attention stage of every GPU op: from its launch's cpu_stages (label, module, op), else Kineto's
-- gpu_user_annotation (orphans), else kernel-name rules. A view: gpu_ops with gpu_op_stage_decisions.
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
--
-- @param view KEYWORD(VIEW|TEMP VIEW)  TEMP VIEW for one connection's own model.
-- @creates gpu_op_stages
CREATE OR REPLACE {{view}} gpu_op_stages AS
SELECT g.id, g.trace_id, g.kind, g.name, coalesce(d.stage, 'other') AS stage,
       coalesce(d.source, 'none') AS source, d.call_id, d.rule,
       coalesce(d.attention_kernel, false) AS attention_kernel, d.kernel_impl, g.orphan, g.dur_ns
FROM gpu_ops g LEFT JOIN gpu_op_stage_decisions d ON d.id = g.id;
