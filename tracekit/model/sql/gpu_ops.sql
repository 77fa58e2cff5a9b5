-- gpu_ops: every kernel, memcpy and memset joined to the runtime call that launched it (columns: docs/schema.md).
--
-- The launch is found by correlation id within the trace. Correlation ids repeat across processes of one
-- trace; then the launch that began last before the GPU op started is the one that queued it. A GPU op with
-- no launch in the trace is kept; the base macros orphan_cause and is_orphan say why and whether it counts.
--
-- @param table KEYWORD(TABLE|TEMP TABLE)  TEMP TABLE for a database that cannot be written.
-- @param gpu_kinds LIST                   The kinds of GPU op (schema.kinds.GPU_OP_KINDS).
-- @param args_spec TEXT       The json_transform spec of the typed args fields (schema.fields.spec).
-- @param args_columns COLUMNS  The typed args columns, read from the parsed args a (schema.fields).
-- @reads slices, runtime_calls
-- @creates gpu_ops
-- @scratch _link         Each GPU op with a launch: launch_id and how many launches shared its correlation (candidates).
CREATE TEMP TABLE _link AS
SELECT id, launch_id, candidates FROM (
    SELECT g.id, r.id AS launch_id,
           count(*) OVER (PARTITION BY g.id) AS candidates,
           row_number() OVER (PARTITION BY g.id
                              ORDER BY (r.ts_ns <= g.ts_ns) DESC, abs(g.ts_ns - r.ts_ns), r.id) AS rn
    FROM slices g JOIN runtime_calls r
      ON r.trace_id = g.trace_id AND r.correlation = g.correlation
    WHERE g.kind IN {{gpu_kinds}}
) WHERE rn = 1;

CREATE {{table}} gpu_ops AS
SELECT g.id, g.trace_id, g.kind, g.name,
       coalesce(g.device, TRY_CAST(g.pid AS INTEGER)) AS device,
       coalesce(g.stream, TRY_CAST(g.tid AS BIGINT)) AS stream,
       g.pid, g.tid, g.ts_ns, g.dur_ns, g.end_ns, g.correlation, g.external_id,
       l.launch_id, r.api AS launch_api, r.tid AS launch_tid, r.ts_ns AS launch_ts_ns,
       is_orphan(orphan_cause(l.launch_id IS NOT NULL, g.correlation)) AS orphan,
       orphan_cause(l.launch_id IS NOT NULL, g.correlation) AS orphan_cause,
       coalesce(r.graph_launch, false) AS via_graph,
       coalesce(l.candidates, 0)::INTEGER AS launch_candidates,
       r.cpu_op_id, r.cpu_op_name, r.top_op_id, r.top_op_name,
       r.annotation_id, r.annotation_name, coalesce(r.annotations, []) AS annotations,
       g.grid, g.block, g.registers_per_thread, g.shared_memory_bytes, g.blocks_per_sm,
       g.warps_per_sm, g.est_occupancy_pct, g.bytes, g.memory_bandwidth_gbps
FROM (SELECT id, trace_id, kind, name, pid, tid, ts_ns, dur_ns, end_ns, correlation, external_id, {{args_columns}}
      FROM (SELECT *, json_transform(args, {{args_spec}}) AS a FROM slices WHERE kind IN {{gpu_kinds}})) g
LEFT JOIN _link l ON l.id = g.id
LEFT JOIN runtime_calls r ON r.id = l.launch_id;

DROP TABLE _link;
