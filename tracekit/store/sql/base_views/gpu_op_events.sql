-- GPU ops (kernels, memcpys, memsets) straight from events, with whether a runtime call of the same correlation is
-- in the trace: the rows of gpu_ops and its orphan_cause, there from the load on, before the linked model is
-- built. gpu_timeline and top_kernels read it.
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
--
-- @param launch_kinds LIST  The kinds of runtime/driver call (schema.kinds.LAUNCH_KINDS).
-- @param gpu_kinds LIST     The kinds of GPU op (schema.kinds.GPU_OP_KINDS).
-- @creates gpu_op_events
CREATE VIEW gpu_op_events AS
SELECT *, orphan_cause(linked, correlation) AS orphan_cause,
       is_orphan(orphan_cause(linked, correlation)) AS orphan FROM (
    SELECT g.id, g.trace_id, g.kind, g.name, g.pid, g.tid, g.ts_ns, g.dur_ns, g.end_ns, g.correlation,
           g.correlation IN (SELECT r.correlation FROM events r
                             WHERE r.ph = 'X' AND r.kind IN {{launch_kinds}} AND r.trace_id = g.trace_id)
               IS TRUE AS linked
    FROM events g WHERE g.ph = 'X' AND g.kind IN {{gpu_kinds}});
