-- The backward nodes and the decided forward op each takes its decision from (by sequence number).
--
-- A backward node is an op autograd ran for a forward op (Fwd thread id > 0); its forward op carries the same
-- Sequence number on the forward's thread (Fwd thread id 0). The forward's thread is the one the fwdbwd flows
-- of that counter start on, when the trace has them (the flows read once); else the one thread whose forward
-- ops carry the number. Every forward op with the number counts, decided or not: an undecided op of another
-- thread makes the pairing ambiguous, and a number that two threads carry with no flow to choose decides
-- nothing. The innermost decided forward op wins (ops nested in a composite share the number). The last
-- statement counts the pairs.
--
-- @reads cpu_slices, cpu_stage_decisions, flows, _cpu
-- @creates _bw           The backward nodes: id, trace_id, pid, tid, seq (sequence number), fwd (forward thread counter), ts_ns, end_ns, pos.
-- @creates _bw_fwd       Each paired node (bid) and the forward op it takes its decision from (fid).
CREATE OR REPLACE TEMP TABLE _bw AS
SELECT s.id, s.trace_id, s.pid, s.tid, s.sequence_number AS seq, s.fwd_thread_id AS fwd,
       s.ts_ns, s.end_ns, c.pos
FROM cpu_slices s JOIN _cpu c USING (id)
WHERE s.kind = 'cpu_op' AND s.fwd_thread_id > 0 AND s.sequence_number IS NOT NULL;

CREATE OR REPLACE TEMP TABLE _bw_fwd AS
WITH fw AS (
    SELECT s.id, s.trace_id, s.pid, s.tid, s.sequence_number AS seq, s.ts_ns, c.pos,
           d.id IS NOT NULL AND {{include attribution/forward_decided d=d}} AS decided
    FROM cpu_slices s JOIN _cpu c USING (id) LEFT JOIN cpu_stage_decisions d USING (id)
    WHERE s.kind = 'cpu_op' AND coalesce(s.fwd_thread_id, 0) = 0
      AND s.sequence_number IN (SELECT seq FROM _bw)
),
-- The thread the fwdbwd flows of each counter start on (the flows read once).
fb AS MATERIALIZED (SELECT trace_id, ph, pid, tid, ts_ns, flow_id FROM flows WHERE kind = 'fwdbwd'),
thr AS (
    SELECT trace_id, fwd, pid, tid FROM (
        SELECT b.trace_id, b.fwd, s.pid, s.tid, count(*) AS n
        FROM fb f
        JOIN _bw b ON b.trace_id = f.trace_id AND b.ts_ns = f.ts_ns
                  AND b.pid IS NOT DISTINCT FROM f.pid AND b.tid IS NOT DISTINCT FROM f.tid
        JOIN fb s ON s.trace_id = f.trace_id AND s.flow_id = f.flow_id AND s.ph = 's'
        WHERE f.ph = 'f'
        GROUP BY ALL
    ) QUALIFY row_number() OVER (PARTITION BY trace_id, fwd ORDER BY n DESC, pid, tid) = 1
)
SELECT b.id AS bid, arg_max(f.id, f.pos) FILTER (WHERE f.decided) AS fid
FROM _bw b
JOIN fw f ON f.trace_id = b.trace_id AND f.seq = b.seq AND f.pid IS NOT DISTINCT FROM b.pid
         AND f.ts_ns <= b.ts_ns
LEFT JOIN thr t ON t.trace_id = b.trace_id AND t.fwd = b.fwd
WHERE t.fwd IS NULL OR (f.pid IS NOT DISTINCT FROM t.pid AND f.tid IS NOT DISTINCT FROM t.tid)
GROUP BY b.id
HAVING count(DISTINCT (f.pid, f.tid)) = 1 AND fid IS NOT NULL;

SELECT count(*) FROM _bw_fwd;
