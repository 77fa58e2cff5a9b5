-- The device side of every collective and point-to-point transfer: GPU kernels that is_collective_kernel says
-- are communication (NCCL ncclKernel_*/ncclDevKernel_*, RCCL, ...), and on CPU Gloo's gloo:* ranges, with
-- their process group and the key that finds the same transfer on every rank taking part. There from the load on; clock alignment and the cluster
-- queries read it.
--
-- A collective is matched across the ranks of its group by its sequence number (args Seq), else by its order
-- of occurrence among that group's collectives of that kind. A point-to-point transfer (send, recv, NCCL's
-- SendRecv kernel) is matched by its two ranks and its order among the transfers between them: PyTorch's Seq
-- of a send or recv counts every peer's, so it does not name one transfer. Its peer is the global rank the
-- op records (args "Dst Rank" of a send, "Src Rank" of a recv), else the group's rank "Rank" names (in
-- "Process Group Ranks"), else the other rank of a two-rank group or of a two-rank job (world_size 2);
-- a transfer whose peer none of them gives is not matched (peer and match_key NULL).
--
-- Columns: docs/schema.md (declared in tracekit/schema/catalog.py).
-- @creates collective_kernels
CREATE VIEW collective_kernels AS
WITH k AS (
    SELECT id, trace_id, name, pid, tid, ts_ns, dur_ns, end_ns, external_id, args
    FROM events WHERE ph = 'X' AND kind = 'kernel' AND is_collective_kernel(name)
    UNION ALL
    -- Gloo (CPU) has no kernel: its work's range (gloo:all_reduce, gloo:send, ...) runs from the
    -- op's enqueue to the collective's completion, waiting for the last rank as a kernel does.
    SELECT id, trace_id, name, pid, tid, ts_ns, dur_ns, end_ns, external_id, args
    FROM events WHERE ph = 'X' AND kind = 'user_annotation' AND starts_with(name, 'gloo:')
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
                    json_extract_string(o.args, '$."Collective name"'),
                    CASE WHEN starts_with(k.name, 'gloo:') THEN replace(k.name[6:], '_', '') END,
                    collective_of_kernel(k.name)) AS collective,
           coalesce(json_extract_string(k.args, '$."Process Group Name"'),
                    json_extract_string(o.args, '$."Process Group Name"')) AS pg_name,
           coalesce(json_extract_string(k.args, '$."Process Group Description"'),
                    json_extract_string(o.args, '$."Process Group Description"')) AS pg_desc,
           coalesce(json_extract_string(k.args, '$."Process Group Ranks"'),
                    json_extract_string(o.args, '$."Process Group Ranks"')) AS pg_ranks,
           coalesce(TRY_CAST(json_extract(k.args, '$."Group size"') AS INTEGER),
                    TRY_CAST(json_extract(o.args, '$."Group size"') AS INTEGER)) AS group_size,
           coalesce(TRY_CAST(json_extract(k.args, '$.Seq') AS BIGINT),
                    TRY_CAST(json_extract(o.args, '$.Seq') AS BIGINT)) AS seq,
           coalesce(TRY_CAST(json_extract(k.args, '$."Dst Rank"') AS INTEGER),
                    TRY_CAST(json_extract(o.args, '$."Dst Rank"') AS INTEGER)) AS dst_rank,
           coalesce(TRY_CAST(json_extract(k.args, '$."Src Rank"') AS INTEGER),
                    TRY_CAST(json_extract(o.args, '$."Src Rank"') AS INTEGER)) AS src_rank,
           coalesce(TRY_CAST(json_extract(k.args, '$.Rank') AS INTEGER),
                    TRY_CAST(json_extract(o.args, '$.Rank') AS INTEGER)) AS group_rank
    FROM k LEFT JOIN op o ON o.trace_id = k.trace_id AND o.external_id = k.external_id
),
g AS (
    SELECT a.*, t.rank AS own_rank, t.world_size,
           concat_ws(' ', coalesce(pg_name, '?'), pg_ranks) AS pg,
           regexp_matches(lower(collective), '^_?(send|recv|sendrecv|isend|irecv|p2p)')
               OR regexp_matches(name, '^(nccl|rccl)(Dev)?Kernel_(SendRecv|Send|Recv)') AS p2p,
           CASE WHEN regexp_matches(lower(collective), '^_?i?send$') THEN 'send'
                WHEN regexp_matches(lower(collective), '^_?i?recv$') THEN 'recv'
                ELSE 'sendrecv' END AS direction,
           -- A truncated list ("[0, 1, ...]") does not cast: NULL.
           TRY_CAST(pg_ranks AS INTEGER[]) AS group_list
    FROM a JOIN traces t USING (trace_id)
),
p AS (
    SELECT g.*,
           CASE WHEN NOT p2p THEN NULL
                ELSE coalesce(
                    CASE direction WHEN 'send' THEN dst_rank WHEN 'recv' THEN src_rank END,
                    CASE WHEN group_rank >= 0 AND group_rank < len(group_list) THEN group_list[group_rank + 1] END,
                    CASE WHEN len(group_list) = 2 AND list_contains(group_list, own_rank)
                         THEN list_filter(group_list, lambda x: x <> own_rank)[1] END,
                    CASE WHEN world_size = 2 AND own_rank IN (0, 1) THEN 1 - own_rank END)
           END AS peer
    FROM g
),
m AS (
    SELECT p.*,
           CASE WHEN NOT p2p THEN collective
                WHEN peer IS NULL OR own_rank IS NULL OR peer = own_rank THEN NULL
                WHEN direction = 'send' THEN concat('p2p ', own_rank, '->', peer)
                WHEN direction = 'recv' THEN concat('p2p ', peer, '->', own_rank)
                ELSE concat('p2p ', least(own_rank, peer), '<->', greatest(own_rank, peer)) END AS match_key
    FROM p
),
i AS (
    SELECT *,
           CASE WHEN NOT p2p THEN coalesce(seq, row_number() OVER (PARTITION BY trace_id, pg, collective
                                                                    ORDER BY ts_ns, id) - 1)
                ELSE row_number() OVER (PARTITION BY trace_id, pg, match_key ORDER BY ts_ns, id) - 1 END AS instance,
           CASE WHEN NOT p2p THEN CASE WHEN seq IS NULL THEN 'order' ELSE 'Seq' END
                WHEN match_key IS NOT NULL THEN 'peer and order' END AS matched_on
    FROM m
)
SELECT id, trace_id, name, pid, tid, ts_ns, dur_ns, end_ns, collective, pg_name, pg_desc, pg_ranks, group_size, seq,
       pg, p2p, peer, match_key, matched_on, instance,
       row_number() OVER (PARTITION BY trace_id, pg, coalesce(match_key, collective), instance ORDER BY ts_ns, id) - 1
           AS part
FROM i;
