"""Backward attention: the autograd ops of a decided forward op take its stage and call.

A training step's backward runs as autograd nodes (``autograd::engine::
evaluate_function: BmmBackward0`` around ``BmmBackward0`` and the ops it
runs), often on autograd's own thread and always outside the forward's
labels, module scopes and eager pattern. The profiler records on every op
autograd knows its ``Sequence number``: a forward op's (``Fwd thread id``
0) and the node that autograd later runs for it (``Fwd thread id`` > 0, a
counter of the forward's thread) carry the same number, which is how
PyTorch's own ``fwdbwd`` flows pair them. So each backward node takes the
decision of the forward op with its sequence number (the innermost decided
one, ops nested in a composite share the number): its stage, and its
forward call's backward call; everything the node runs (its ops, their
launches, the GPU ops those launch) goes with it, unless a layer of its own
decided it (a fused SDPA backward op is a call already). The source is
``backward`` and the decider the forward op.

Which thread ran the forward: the thread the ``fwdbwd`` flows start on for
that counter, when the trace has them; else the one thread whose forward ops
carry the number. A number that two threads' forward ops carry with no flow
to choose between them decides nothing.

One backward call per forward call: the fused backward op inside its nodes
when there is one (its call, from ``rule_op_stages``, grows by the nodes'
other work: the projections' and RoPE's gradients of a module call), else
a call of its own, whose id is its first node's (``_bw_call.new``).
"""

from __future__ import annotations

import duckdb

from tracekit.common.sqltext import in_list
from tracekit.schema.kinds import LAUNCH_KINDS

SOURCE = "backward"
# A forward decision worth giving the backward: the op is in an attention call or has a stage.
_DECIDED = "(d.call_id IS NOT NULL OR coalesce(d.stage, 'other') <> 'other')"


def propagate(con: duckdb.DuckDBPyConnection) -> None:
    """Add the backward nodes' rows to ``cpu_stage_decisions`` and create ``_bw_call`` (call_id,
    fwd_call_id, trace_id, ts_ns, dur_ns, new). Needs ``_cpu`` and ``_anc``."""
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _bw_call (call_id BIGINT, fwd_call_id BIGINT, trace_id INTEGER,
                                                  ts_ns BIGINT, dur_ns BIGINT, new BOOLEAN)"""
    )
    # Nothing decided in the forward (a trace without attention): nothing to give the backward.
    if not con.execute(f"SELECT count(*) FROM cpu_stage_decisions d WHERE {_DECIDED}").fetchone()[0]:  # type: ignore[index]
        return
    con.execute(
        """CREATE OR REPLACE TEMP TABLE _bw AS
           SELECT s.id, s.trace_id, s.pid, s.tid, s.sequence_number AS seq, s.fwd_thread_id AS fwd,
                  s.ts_ns, s.end_ns, c.pos
           FROM cpu_slices s JOIN _cpu c USING (id)
           WHERE s.kind = 'cpu_op' AND s.fwd_thread_id > 0 AND s.sequence_number IS NOT NULL"""
    )
    # The forward ops with a sequence number, whether decided or not (an undecided op of another
    # thread with the same number makes the pairing ambiguous).
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _bw_fwd AS
           WITH fw AS (
               SELECT s.id, s.trace_id, s.pid, s.tid, s.sequence_number AS seq, s.ts_ns, c.pos,
                      d.id IS NOT NULL AND {_DECIDED} AS decided
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
           HAVING count(DISTINCT (f.pid, f.tid)) = 1 AND fid IS NOT NULL"""
    )
    if not con.execute("SELECT count(*) FROM _bw_fwd").fetchone()[0]:  # type: ignore[index]
        _drop(con)
        return
    # Every slice under a paired node (itself included; calls through their parent), by its
    # innermost paired node.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _bw_x AS
            WITH m AS (SELECT b.id AS bid, b.pos AS bpos FROM _bw_fwd f JOIN _bw b ON b.id = f.bid),
            pairs AS (
                SELECT bid AS x, bid, bpos FROM m
                UNION ALL SELECT a.id, m.bid, m.bpos FROM _anc a JOIN m ON m.bid = a.aid
            )
            SELECT x, arg_max(bid, bpos) AS bid FROM (
                SELECT x, bid, bpos FROM pairs
                UNION ALL
                SELECT s.id, p.bid, p.bpos FROM cpu_slices s JOIN pairs p ON p.x = s.parent_id
                WHERE s.kind IN {in_list(LAUNCH_KINDS)}
            ) GROUP BY x"""
    )
    # Per forward call: a call already inside its nodes (a fused backward op), else a new one.
    con.execute(
        """INSERT INTO _bw_call
           SELECT coalesce(min(d.call_id), arg_min(n.id, n.pos)), fd.call_id, any_value(n.trace_id),
                  min(n.ts_ns), max(n.end_ns) - min(n.ts_ns), min(d.call_id) IS NULL
           FROM _bw_x x
           JOIN _bw_fwd f ON f.bid = x.bid
           JOIN cpu_stage_decisions fd ON fd.id = f.fid
           JOIN _bw n ON n.id = x.bid
           LEFT JOIN cpu_stage_decisions d ON d.id = x.x AND d.call_id IS NOT NULL
           WHERE fd.call_id IS NOT NULL
           GROUP BY fd.call_id"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _bw_rows AS
            SELECT x.x AS id, n.trace_id, fd.stage, '{SOURCE}' AS source, bc.call_id, f.fid AS decider_id, fd.rule
            FROM _bw_x x
            JOIN _bw n ON n.id = x.bid
            JOIN _bw_fwd f ON f.bid = x.bid
            JOIN cpu_stage_decisions fd ON fd.id = f.fid
            LEFT JOIN _bw_call bc ON bc.fwd_call_id = fd.call_id
            -- What another layer decided keeps its decision.
            ANTI JOIN cpu_stage_decisions d ON d.id = x.x"""
    )
    con.execute("INSERT INTO cpu_stage_decisions BY NAME SELECT * FROM _bw_rows")
    _drop(con)


def _drop(con: duckdb.DuckDBPyConnection) -> None:
    for t in ("_bw", "_bw_fwd", "_bw_x", "_bw_rows"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
