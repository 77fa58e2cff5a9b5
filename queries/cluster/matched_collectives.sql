-- The same collective on every rank of its process group: each rank's arrival, wait and the skew.
--
-- A collective instance is one all-reduce (all-gather, broadcast, ...) of one
-- process group, identified on every rank by the group (Process Group Name and
-- Ranks), the collective and its sequence number in the group (args Seq,
-- PyTorch 2.4 and later), falling back to its order of occurrence among that
-- group's collectives of that kind on the rank (which assumes the ranks'
-- profiling windows start at the same collective). A point-to-point transfer
-- (send/recv, NCCL's SendRecv kernel: pipeline parallelism) is one instance of
-- its two ranks, identified by the pair and its order among the transfers
-- between them (collective_kernels.peer says how the peer is found; one whose
-- peer is not recorded is left out, and 'tracekit query' says so in a note).
-- matched_on says which of these identified the row. Its device side is the
-- communication kernel (collective_kernels: NCCL ncclKernel_*/ncclDevKernel_*,
-- RCCL, ...). Ranks are matched within a job (traces.job). One row per rank of
-- each instance seen on at least two ranks.
--
-- A collective's kernels end together on every rank of the group: a rank that
-- arrives early waits inside its kernel for the last one (a send waits for its
-- receiver the same way). So arrival and wait
-- are read from the kernels' durations, which no clock offset between hosts
-- can distort: wait_ns = dur_ns - the shortest duration of the instance (the
-- last rank's), arrival_ns = the longest duration - dur_ns. start_ns puts the
-- kernel on the job's reference clock with traces.clock_offset_ns (found from
-- the same ends; see docs/schema.md), for a timeline.
--
-- @column job VARCHAR              Job (traces.job; NULL: no job id recorded).
-- @column pg VARCHAR               Process group: its name and ranks as written ("0 [0, 1, 2, 3]"; "?" when not recorded).
-- @column collective VARCHAR       Collective (args "Collective name", else from the kernel name): send, recv, sendrecv for point-to-point.
-- @column instance BIGINT          Sequence number in the group (args Seq), else order of occurrence from 0 (point-to-point: among the transfers between the two ranks).
-- @column matched_on VARCHAR       What identified the instance on every rank: Seq, order (of occurrence in the group), or peer and order (point-to-point).
-- @column trace VARCHAR            Trace label.
-- @column rank INTEGER             The trace's rank.
-- @column peer INTEGER             Point-to-point: the other rank of the transfer (NULL for a collective).
-- @column ranks BIGINT             Ranks on which this instance was found.
-- @column group_size INTEGER       Ranks of the process group (args "Group size").
-- @column kernel VARCHAR           The communication kernel.
-- @column start_ns BIGINT          Kernel start on the job's reference clock (ts_ns - clock_offset_ns), ns; NULL when the rank's clock is not aligned.
-- @column dur_ns BIGINT            Kernel duration, ns.
-- @column arrival_ns BIGINT        When this rank arrived after the first rank to arrive, ns (from durations).
-- @column wait_ns BIGINT           Time this rank waited in the kernel for the last rank, ns.
-- @column last_arrival BOOLEAN     This rank arrived last: the others waited for it (ties: the later start, then the higher rank); no rank when all arrived together (skew_ns 0).
-- @column wait_caused_ns BIGINT    On the last arrival's row, the time all the others waited for it (sum of wait_ns), ns; else 0.
-- @column skew_ns BIGINT           Spread of the arrivals of this instance (longest - shortest duration), ns.
WITH k AS (
    SELECT c.*, t.trace, t.rank, t.job, c.ts_ns - t.clock_offset_ns AS aligned_ns
    FROM collective_kernels c JOIN traces t USING (trace_id)
    WHERE c.match_key IS NOT NULL
),
m AS (
    SELECT k.*,
           count(*) OVER w AS ranks,
           max(dur_ns) OVER w AS longest_ns,
           min(dur_ns) OVER w AS shortest_ns,
           row_number() OVER (PARTITION BY job, pg, match_key, instance, part
                              ORDER BY dur_ns, aligned_ns DESC NULLS LAST, rank DESC NULLS LAST, trace_id DESC) AS lateness
    FROM k
    WINDOW w AS (PARTITION BY job, pg, match_key, instance, part)
)
SELECT job, pg, collective, instance, matched_on, trace, rank, peer, ranks, group_size, name AS kernel, aligned_ns AS start_ns, dur_ns,
       longest_ns - dur_ns AS arrival_ns,
       dur_ns - shortest_ns AS wait_ns,
       lateness = 1 AND longest_ns > shortest_ns AS last_arrival,
       CASE WHEN lateness = 1 AND longest_ns > shortest_ns
            THEN (sum(dur_ns) OVER (PARTITION BY job, pg, match_key, instance, part) - ranks * shortest_ns)::BIGINT
            ELSE 0 END AS wait_caused_ns,
       longest_ns - shortest_ns AS skew_ns
FROM m
WHERE ranks > 1
ORDER BY job NULLS FIRST, pg, match_key, instance, part, rank NULLS LAST, trace;
