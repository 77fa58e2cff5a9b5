-- The device side of every collective: GPU kernels that is_collective_kernel says are communication (NCCL
-- ncclKernel_*/ncclDevKernel_*, RCCL, ...), with their process group and the instance that identifies the same
-- collective on every rank of the group. There from the load on; clock alignment and the cluster queries read it.
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
-- @creates collective_kernels
CREATE VIEW collective_kernels AS
WITH k AS (
    SELECT id, trace_id, name, pid, tid, ts_ns, dur_ns, end_ns, external_id, args
    FROM events WHERE ph = 'X' AND kind = 'kernel' AND is_collective_kernel(name)
),
-- The CPU op around the launch records the collective's parameters (record_param_comms,
-- the kernel's External id); Kineto copies some of them onto the kernel, not always all (Seq).
op AS (
    SELECT trace_id, external_id, arg_min(args, id) AS args
    FROM events
    WHERE ph = 'X' AND kind = 'cpu_op' AND name = 'record_param_comms' AND external_id IS NOT NULL
    GROUP BY trace_id, external_id
),
a AS (
    SELECT k.id, k.trace_id, k.name, k.pid, k.tid, k.ts_ns, k.dur_ns, k.end_ns,
           coalesce(json_extract_string(k.args, '$."Collective name"'),
                    json_extract_string(o.args, '$."Collective name"'), collective_of_kernel(k.name)) AS collective,
           coalesce(json_extract_string(k.args, '$."Process Group Name"'),
                    json_extract_string(o.args, '$."Process Group Name"')) AS pg_name,
           coalesce(json_extract_string(k.args, '$."Process Group Description"'),
                    json_extract_string(o.args, '$."Process Group Description"')) AS pg_desc,
           coalesce(json_extract_string(k.args, '$."Process Group Ranks"'),
                    json_extract_string(o.args, '$."Process Group Ranks"')) AS pg_ranks,
           coalesce(TRY_CAST(json_extract(k.args, '$."Group size"') AS INTEGER),
                    TRY_CAST(json_extract(o.args, '$."Group size"') AS INTEGER)) AS group_size,
           coalesce(TRY_CAST(json_extract(k.args, '$.Seq') AS BIGINT),
                    TRY_CAST(json_extract(o.args, '$.Seq') AS BIGINT)) AS seq
    FROM k LEFT JOIN op o ON o.trace_id = k.trace_id AND o.external_id = k.external_id
),
g AS (
    SELECT *, concat_ws(' ', coalesce(pg_name, '?'), pg_ranks) AS pg,
           regexp_matches(lower(collective), '^_?(send|recv|sendrecv|isend|irecv|p2p)')
               OR regexp_matches(name, '^(nccl|rccl)(Dev)?Kernel_(SendRecv|Send|Recv)') AS p2p
    FROM a
),
i AS (
    SELECT *, coalesce(seq, row_number() OVER (PARTITION BY trace_id, pg, collective ORDER BY ts_ns, id) - 1)
                  AS instance
    FROM g
)
SELECT *, row_number() OVER (PARTITION BY trace_id, pg, collective, instance ORDER BY ts_ns, id) - 1 AS part
FROM i;
