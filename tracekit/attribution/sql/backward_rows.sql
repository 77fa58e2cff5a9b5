-- The backward nodes' decisions: everything a paired node runs takes its forward op's stage and backward call.
--
-- Every slice under a paired node (itself included; runtime calls through their parent) goes with its
-- innermost paired node. One backward call per forward call: a call already inside its nodes (a fused
-- backward op, decided by its op rule) when there is one, spanning all the nodes, else a call of its own
-- whose id is its first node's (new). What another layer decided keeps its decision.
--
-- @param launch_kinds LIST  The kinds of runtime/driver call (schema.kinds.LAUNCH_KINDS).
-- @param source TEXT        The source of these decisions (backward.SOURCE).
-- @reads cpu_slices, cpu_stage_decisions, _anc, _bw, _bw_fwd
-- @creates _bw_call         Filled: one row per forward call with a backward (attribution/backward_start made it).
-- @scratch _bw_x            Every slice under a paired node (x) and its innermost paired node (bid).
-- @scratch _bw_rows         The rows added to cpu_stage_decisions.
CREATE OR REPLACE TEMP TABLE _bw_x AS
WITH m AS (SELECT b.id AS bid, b.pos AS bpos FROM _bw_fwd f JOIN _bw b ON b.id = f.bid),
pairs AS (
    SELECT bid AS x, bid, bpos FROM m
    UNION ALL SELECT a.id, m.bid, m.bpos FROM _anc a JOIN m ON m.bid = a.aid
)
SELECT x, arg_max(bid, bpos) AS bid FROM (
    SELECT x, bid, bpos FROM pairs
    UNION ALL
    SELECT s.id, p.bid, p.bpos FROM cpu_slices s JOIN pairs p ON p.x = s.parent_id
    WHERE s.kind IN {{launch_kinds}}
) GROUP BY x;

-- Per forward call: a call already inside its nodes (a fused backward op), else a new one.
INSERT INTO _bw_call
SELECT coalesce(min(d.call_id), arg_min(n.id, n.pos)), fd.call_id, any_value(n.trace_id),
       min(n.ts_ns), max(n.end_ns) - min(n.ts_ns), min(d.call_id) IS NULL
FROM _bw_x x
JOIN _bw_fwd f ON f.bid = x.bid
JOIN cpu_stage_decisions fd ON fd.id = f.fid
JOIN _bw n ON n.id = x.bid
LEFT JOIN cpu_stage_decisions d ON d.id = x.x AND d.call_id IS NOT NULL
WHERE fd.call_id IS NOT NULL
GROUP BY fd.call_id;

CREATE OR REPLACE TEMP TABLE _bw_rows AS
SELECT x.x AS id, n.trace_id, fd.stage, {{source}} AS source, bc.call_id, f.fid AS decider_id, fd.rule
FROM _bw_x x
JOIN _bw n ON n.id = x.bid
JOIN _bw_fwd f ON f.bid = x.bid
JOIN cpu_stage_decisions fd ON fd.id = f.fid
LEFT JOIN _bw_call bc ON bc.fwd_call_id = fd.call_id
-- What another layer decided keeps its decision.
ANTI JOIN cpu_stage_decisions d ON d.id = x.x;

INSERT INTO cpu_stage_decisions BY NAME SELECT * FROM _bw_rows;

DROP TABLE _bw;

DROP TABLE _bw_fwd;

DROP TABLE _bw_x;

DROP TABLE _bw_rows;
