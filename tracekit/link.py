"""Linking: GPU ops -> the runtime call that launched them -> the CPU op stack.

Builds the linked model over the base tables (see docs/schema.md):

- ``cpu_slices``: CPU-side slices with depth, parent and self time, nested by
  time containment per (trace, pid, tid);
- ``cpu_ancestors``: every (slice, enclosing slice) pair on one thread;
- ``runtime_calls``: runtime/driver calls with their enclosing CPU op stack;
- ``gpu_ops``: kernels, memcpys and memsets joined to their launch (by
  correlation id, scoped per trace) and, through it, to the CPU op stack;
  GPU ops with no launch in the trace are kept and flagged ``orphan``.

Interval containment is a range join. DuckDB plans a range join that also
has an equality key (same thread) as a hash join, which takes minutes on
real traces; so each thread's timeline is shifted onto its own stretch of
one integer axis and the join uses inequalities only (an IEJoin).
"""

from __future__ import annotations

import duckdb

from .kinds import CPU_NEST_KINDS, GPU_OP_KINDS, LAUNCH_KINDS

# A child may end a few hundred ns after its parent (clock skew between the
# profiler's callbacks); containment allows this much overhang.
BLEED_NS = 1000


def _in(values) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


def build(con: duckdb.DuckDBPyConnection) -> None:
    """Create the linked tables from the base tables."""
    con.execute("SET prefer_range_joins = true")
    _nest_cpu(con)
    _runtime_calls(con)
    _gpu_ops(con)
    con.execute("DROP TABLE IF EXISTS _cpu")


def _nest_cpu(con) -> None:
    con.execute(
        f"""
        CREATE TEMP TABLE _cpu AS
        SELECT s.id, s.trace_id, s.kind, s.name, s.ts_ns, s.dur_ns, s.end_ns,
               dense_rank() OVER (ORDER BY s.trace_id, s.pid, s.tid) AS lane,
               s.ts_ns - t.t0 AS rel
        FROM slices s
        JOIN (SELECT trace_id, min(ts_ns) AS t0 FROM slices WHERE kind IN {_in(CPU_NEST_KINDS)} GROUP BY trace_id) t
          USING (trace_id)
        WHERE s.kind IN {_in(CPU_NEST_KINDS)} AND s.ts_ns IS NOT NULL
        """
    )
    lanes, span = con.execute("SELECT coalesce(max(lane), 0), coalesce(max(rel + dur_ns), 0) FROM _cpu").fetchone()
    shift = 1 << (int(span) + BLEED_NS + 1).bit_length()
    if (lanes + 1) * shift < (1 << 62):
        # One integer axis, lanes far apart: containment alone implies same thread.
        con.execute(
            f"""
            CREATE TEMP TABLE _cpuk AS
            SELECT *, lane * {shift} + rel AS k0, lane * {shift} + rel + dur_ns AS k1,
                   lane * {shift} + rel + dur_ns - {BLEED_NS} AS k1_bleed
            FROM _cpu
            """
        )
        join_on = "a.k0 <= c.k0 AND a.k1 >= c.k1_bleed"
    else:  # astronomically many lanes x span: fall back to the keyed join
        con.execute(
            f"""CREATE TEMP TABLE _cpuk AS
                SELECT *, rel AS k0, rel + dur_ns AS k1, rel + dur_ns - {BLEED_NS} AS k1_bleed FROM _cpu"""
        )
        join_on = "a.lane = c.lane AND a.k0 <= c.k0 AND a.k1 >= c.k1_bleed"
    # The join holds only the two inequalities: given more, DuckDB may pick
    # other ones for the IEJoin and run hundreds of times slower. It carries
    # the columns the filter needs so no join back is required.
    con.execute(
        f"""CREATE TEMP TABLE _pairs AS
            SELECT c.id, c.trace_id, c.ts_ns AS c_ts, c.dur_ns AS c_dur,
                   a.id AS ancestor_id, a.kind AS ancestor_kind, a.name AS ancestor_name,
                   a.ts_ns AS ancestor_ts_ns, a.dur_ns AS ancestor_dur_ns, a.end_ns AS a_end
            FROM _cpuk c JOIN _cpuk a ON {join_on}"""
    )
    con.execute("DROP TABLE _cpuk")
    con.execute(
        """
        CREATE TABLE cpu_ancestors AS
        SELECT id, ancestor_id, trace_id, ancestor_kind, ancestor_name, ancestor_ts_ns, ancestor_dur_ns
        FROM _pairs
        WHERE ancestor_id <> id AND a_end > c_ts
          AND (ancestor_ts_ns < c_ts OR (ancestor_ts_ns = c_ts
               AND (ancestor_dur_ns > c_dur OR (ancestor_dur_ns = c_dur AND ancestor_id < id))))
        """
    )
    con.execute("DROP TABLE _pairs")
    # The innermost ancestor opened last (ties: the longer one is outer, then file order).
    con.execute(
        """
        CREATE TEMP TABLE _nest AS
        SELECT id, count(*) AS depth,
               arg_max(ancestor_id, (ancestor_ts_ns, -ancestor_dur_ns, ancestor_id)) AS parent_id,
               arg_min(ancestor_id, (ancestor_ts_ns, -ancestor_dur_ns, ancestor_id)) AS root_id
        FROM cpu_ancestors GROUP BY id
        """
    )
    con.execute(
        """
        CREATE TEMP TABLE _child AS
        SELECT n.parent_id AS id, count(*) AS children,
               sum(least(c.end_ns, p.end_ns) - greatest(c.ts_ns, p.ts_ns)) AS child_ns
        FROM _nest n JOIN _cpu c ON c.id = n.id JOIN _cpu p ON p.id = n.parent_id
        GROUP BY n.parent_id
        """
    )
    con.execute(
        """
        CREATE TABLE cpu_slices AS
        SELECT s.id, s.trace_id, s.kind, s.name, s.pid, s.tid, s.ts_ns, s.dur_ns, s.end_ns,
               coalesce(n.depth, 0)::INTEGER AS depth, n.parent_id, coalesce(n.root_id, s.id) AS root_id,
               coalesce(ch.children, 0)::INTEGER AS children,
               greatest(s.dur_ns - coalesce(ch.child_ns, 0), 0)::BIGINT AS self_ns,
               s.external_id, s.correlation, s.sequence_number, s.record_function_id,
               s.input_dims, s.input_types, s.concrete_inputs
        FROM slices s JOIN _cpu USING (id)
        LEFT JOIN _nest n USING (id) LEFT JOIN _child ch USING (id)
        """
    )
    con.execute("DROP TABLE _nest")
    con.execute("DROP TABLE _child")


def _runtime_calls(con) -> None:
    con.execute(
        f"""
        CREATE TEMP TABLE _launch_stack AS
        SELECT a.id,
               arg_max(a.ancestor_id, (a.ancestor_ts_ns, -a.ancestor_dur_ns, a.ancestor_id))
                   FILTER (WHERE a.ancestor_kind = 'cpu_op') AS cpu_op_id,
               arg_min(a.ancestor_id, (a.ancestor_ts_ns, -a.ancestor_dur_ns, a.ancestor_id))
                   FILTER (WHERE a.ancestor_kind = 'cpu_op') AS top_op_id,
               arg_max(a.ancestor_id, (a.ancestor_ts_ns, -a.ancestor_dur_ns, a.ancestor_id))
                   FILTER (WHERE a.ancestor_kind = 'user_annotation') AS annotation_id,
               list(a.ancestor_name ORDER BY a.ancestor_ts_ns, -a.ancestor_dur_ns, a.ancestor_id)
                   FILTER (WHERE a.ancestor_kind = 'user_annotation') AS annotations
        FROM cpu_ancestors a JOIN slices s USING (id)
        WHERE s.kind IN {_in(LAUNCH_KINDS)}
        GROUP BY a.id
        """
    )
    con.execute(
        """
        CREATE TEMP TABLE _sflow AS
        SELECT trace_id, TRY_CAST(flow_id AS BIGINT) AS correlation, pid, tid, ts_ns
        FROM flows WHERE kind = 'ac2g' AND ph = 's'
        """
    )
    con.execute(
        f"""
        CREATE TABLE runtime_calls AS
        SELECT s.id, s.trace_id, s.kind, s.name AS api, s.pid, s.tid, s.ts_ns, s.dur_ns, s.end_ns,
               s.correlation, s.external_id, s.cbid,
               st.cpu_op_id, st.top_op_id, st.annotation_id, coalesce(st.annotations, []) AS annotations,
               s.name ILIKE '%graphlaunch%' AS graph_launch,
               -- NULL: no ac2g flow has this correlation; false: flows exist, none starts at this call.
               CASE WHEN EXISTS (SELECT 1 FROM _sflow f WHERE f.trace_id = s.trace_id AND f.correlation = s.correlation)
                    THEN EXISTS (SELECT 1 FROM _sflow f WHERE f.trace_id = s.trace_id AND f.correlation = s.correlation
                                 AND f.pid = s.pid AND f.tid = s.tid AND f.ts_ns = s.ts_ns) END AS flow_matches
        FROM slices s LEFT JOIN _launch_stack st USING (id)
        WHERE s.kind IN {_in(LAUNCH_KINDS)}
        """
    )
    con.execute("DROP TABLE _launch_stack")
    con.execute("DROP TABLE _sflow")


def _gpu_ops(con) -> None:
    # Correlation ids repeat across processes of one trace; then the launch
    # that began last before the GPU op started is the one that queued it.
    con.execute(
        f"""
        CREATE TEMP TABLE _link AS
        SELECT id, launch_id, candidates FROM (
            SELECT g.id, r.id AS launch_id,
                   count(*) OVER (PARTITION BY g.id) AS candidates,
                   row_number() OVER (PARTITION BY g.id
                                      ORDER BY (r.ts_ns <= g.ts_ns) DESC, abs(g.ts_ns - r.ts_ns), r.id) AS rn
            FROM slices g JOIN runtime_calls r
              ON r.trace_id = g.trace_id AND r.correlation = g.correlation
            WHERE g.kind IN {_in(GPU_OP_KINDS)}
        ) WHERE rn = 1
        """
    )
    con.execute(
        f"""
        CREATE TABLE gpu_ops AS
        SELECT g.id, g.trace_id, g.kind, g.name,
               coalesce(g.device, TRY_CAST(g.pid AS INTEGER)) AS device,
               coalesce(g.stream, TRY_CAST(g.tid AS BIGINT)) AS stream,
               g.pid, g.tid, g.ts_ns, g.dur_ns, g.end_ns, g.correlation, g.external_id,
               l.launch_id, r.api AS launch_api, r.tid AS launch_tid, r.ts_ns AS launch_ts_ns,
               l.launch_id IS NULL AS orphan,
               coalesce(r.graph_launch, false) AS via_graph,
               coalesce(l.candidates, 0)::INTEGER AS launch_candidates,
               r.cpu_op_id, op.name AS cpu_op_name, r.top_op_id, top.name AS top_op_name,
               r.annotation_id, ann.name AS annotation_name, coalesce(r.annotations, []) AS annotations,
               g.grid, g.block, g.registers_per_thread, g.shared_memory_bytes, g.blocks_per_sm,
               g.warps_per_sm, g.est_occupancy_pct, g.bytes, g.memory_bandwidth_gbps
        FROM slices g
        LEFT JOIN _link l ON l.id = g.id
        LEFT JOIN runtime_calls r ON r.id = l.launch_id
        LEFT JOIN slices op ON op.id = r.cpu_op_id
        LEFT JOIN slices top ON top.id = r.top_op_id
        LEFT JOIN slices ann ON ann.id = r.annotation_id
        WHERE g.kind IN {_in(GPU_OP_KINDS)}
        """
    )
    con.execute("DROP TABLE _link")
