-- Attention stage of every CPU slice (cpu_slices), decided by labels, then module scopes, then op rules; the basis
-- of CPU-time attribution. A view: cpu_slices with cpu_stage_decisions.
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
--
-- @param view KEYWORD(VIEW|TEMP VIEW)  TEMP VIEW for one connection's own model.
-- @creates cpu_stages
CREATE OR REPLACE {{view}} cpu_stages AS
SELECT s.id, s.trace_id, s.kind, s.name, coalesce(d.stage, 'other') AS stage,
       coalesce(d.source, 'none') AS source, d.call_id, d.decider_id, d.rule, s.self_ns
FROM cpu_slices s LEFT JOIN cpu_stage_decisions d ON d.id = s.id;
