-- Collective bandwidth per rank and message size: algbw and busbw as nccl-tests computes them.
--
-- One row per trace (rank), collective and message size. A call is one collective
-- instance (collective_kernels: its NCCL/RCCL kernels, the parts of a coalesced
-- one summed); its time is its kernels' GPU duration, which on a rank that arrived
-- early includes the wait for the last rank (matched_collectives says how much),
-- so a slow rank makes the others' figures low too. The message size comes from
-- the record_param_comms args (In/Out msg nelems and dtype, copied onto the kernel
-- or read from the op of its External id): size_bytes = max(in, out) elements *
-- the dtype's bytes, which is nccl-tests' size for every collective (the whole
-- output of an all-gather, the whole input of a reduce-scatter or all-to-all).
-- algbw_gbps = size_bytes * calls / time_ns (bytes per ns = GB/s, 10^9 bytes);
-- busbw_gbps = algbw times nccl-tests' bus factor for n = Group size ranks
-- (PERFORMANCE.md): all-reduce 2(n-1)/n; all-gather, reduce-scatter and
-- all-to-all (n-1)/n; broadcast, reduce and point-to-point send/recv 1; NULL for
-- any other (barrier, gather, scatter). busbw is the figure to hold against the
-- interconnect's peak (rule_link_peaks; slow_collectives). Collectives without a
-- kernel (a 'wait') or without a message size are left out. A size is a bucket
-- of its own; a rank whose one collective and size ran in groups of different
-- sizes has a row per group size.
--
-- @column trace VARCHAR        Trace label.
-- @column rank INTEGER         The trace's rank (traces.rank; NULL when none was recorded).
-- @column collective VARCHAR   Collective as record_param_comms names it (allreduce, allgather, broadcast, ...).
-- @column size_bytes BIGINT    Message size, bytes: max(In, Out msg nelems) * the dtype's size.
-- @column calls BIGINT         Collective calls of this size.
-- @column time_ns BIGINT       Their summed kernel time, nanoseconds.
-- @column algbw_gbps DOUBLE    size_bytes * calls / time_ns: algorithm bandwidth, GB/s.
-- @column busbw_gbps DOUBLE    algbw_gbps * the bus factor of the collective for its group size, GB/s.
WITH k AS (
    SELECT ck.id, ck.trace_id, ck.pg, ck.instance, ck.collective, ck.group_size, ck.dur_ns, e.external_id
    FROM collective_kernels ck
    JOIN events e ON e.id = ck.id
),
op AS (
    SELECT e.trace_id, e.external_id, arg_min(c.in_msg_nelems, c.id) AS in_n,
           arg_min(c.out_msg_nelems, c.id) AS out_n, arg_min(c.dtype, c.id) AS dtype
    FROM collectives c
    JOIN events e ON e.id = c.id
    WHERE c.kind = 'cpu_op' AND c.name = 'record_param_comms' AND e.external_id IS NOT NULL
    GROUP BY e.trace_id, e.external_id
),
sized AS (
    SELECT k.*, greatest(coalesce(kc.in_msg_nelems, o.in_n), coalesce(kc.out_msg_nelems, o.out_n))
               * CASE coalesce(kc.dtype, o.dtype)
                     WHEN 'Double' THEN 8 WHEN 'Long' THEN 8 WHEN 'ComplexFloat' THEN 8 WHEN 'UInt64' THEN 8
                     WHEN 'ComplexDouble' THEN 16
                     WHEN 'Float' THEN 4 WHEN 'Int' THEN 4 WHEN 'ComplexHalf' THEN 4 WHEN 'UInt32' THEN 4
                     WHEN 'Half' THEN 2 WHEN 'BFloat16' THEN 2 WHEN 'Short' THEN 2 WHEN 'UInt16' THEN 2
                     WHEN 'Byte' THEN 1 WHEN 'Char' THEN 1 WHEN 'Bool' THEN 1
                     ELSE CASE WHEN coalesce(kc.dtype, o.dtype) LIKE 'Float8%' THEN 1 END
                 END AS size_bytes
    FROM k
    LEFT JOIN collectives kc ON kc.id = k.id
    LEFT JOIN op o ON o.trace_id = k.trace_id AND o.external_id = k.external_id
),
calls AS (
    SELECT trace_id, pg, instance, any_value(collective) AS collective, max(group_size) AS n,
           max(size_bytes) AS size_bytes, sum(dur_ns) AS time_ns
    FROM sized
    GROUP BY trace_id, pg, instance, collective
),
grouped AS (
    SELECT trace_id, collective, size_bytes, n, count(*) AS calls, sum(time_ns)::BIGINT AS time_ns,
           CASE WHEN regexp_matches(lower(replace(collective, '_', '')), 'allreduce') THEN 2.0 * (n - 1) / n
                WHEN regexp_matches(lower(replace(collective, '_', '')), 'allgather|reducescatter|alltoall')
                    THEN 1.0 * (n - 1) / n
                WHEN regexp_matches(lower(replace(collective, '_', '')), '^(broadcast|reduce|send|recv|sendrecv|isend|irecv|p2p)$')
                    THEN 1.0
            END AS bus_factor
    FROM calls
    WHERE size_bytes > 0
    GROUP BY trace_id, collective, size_bytes, n
)
SELECT t.trace, t.rank, g.collective, g.size_bytes::BIGINT AS size_bytes, g.calls, g.time_ns,
       round(g.size_bytes * g.calls / nullif(g.time_ns, 0), 3) AS algbw_gbps,
       round(g.size_bytes * g.calls / nullif(g.time_ns, 0) * g.bus_factor, 3) AS busbw_gbps
FROM grouped g
JOIN traces t USING (trace_id)
ORDER BY t.trace, g.collective, g.size_bytes, g.n;
