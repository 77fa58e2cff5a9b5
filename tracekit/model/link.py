"""Linking: GPU ops -> the runtime call that launched them -> the CPU op stack.

Builds the linked model over the base tables (see docs/schema.md):

- ``cpu_slices``: CPU-side slices with depth, parent, self time and their
  stack (innermost and outermost enclosing cpu_op, enclosing annotations),
  nested by time containment per (trace, pid, tid);
- ``runtime_calls``: runtime/driver calls with the stack they were made in;
- ``gpu_ops``: kernels, memcpys and memsets joined to their launch (by
  correlation id, scoped per trace) and, through it, to the CPU op stack;
  GPU ops with no launch in the trace are kept and flagged ``orphan``.

Nesting is defined by a range join among the slices that can contain others
(ops and annotations): an ancestor is an earlier-opened container of the same
thread, still open at the slice's start, that ends at most ``BLEED_NS`` before
it. DuckDB plans a range join that also has an equality key (same thread) as a
hash join, which takes minutes on real traces; so each thread's timeline is
shifted onto its own stretch of one integer axis and the join uses
inequalities only (an IEJoin). When the containers nest cleanly (no overhang,
no partial overlap: every trace measured so far), one ordered pass over that
axis (``_sweep``) gives the same ancestors, stacks and pairs faster; it checks
that condition and otherwise leaves the trace to the range join. A trace of
fewer than ``SWEEP_MIN`` containers is nested by the range join: there the
sweep's imports (polars, pyarrow) cost more than they save. Runtime
calls, the most numerous slices, are leaves: the last container opened
before each call is found (by the sweep's binary searches, or an ASOF join),
and the call's parent is the innermost of that container and its ancestors
that still encloses the call.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import duckdb

from tracekit.common import background
from tracekit.common.sqltext import in_list as _in
from tracekit.common.sqltext import literal
from tracekit.schema import fields
from tracekit.schema.kinds import CPU_NEST_KINDS, GPU_OP_KINDS, LAUNCH_KINDS, orphan_cause_sql

if TYPE_CHECKING:
    import pyarrow as pa

# A child may end a few hundred ns after its parent (clock skew between the
# profiler's callbacks); containment allows this much overhang.
BLEED_NS = 1000

# The tables ``build`` creates.
TABLES = ("cpu_slices", "runtime_calls", "gpu_ops", "python_functions", "collectives")

_CONTAINER_KINDS = tuple(k for k in CPU_NEST_KINDS if k not in LAUNCH_KINDS)
# Among enclosing slices the innermost opened last (ties: the shorter, then
# the later in the file): the largest position in axis order.
_INNER = "a_pos"
_ENCLOSES = f"a_end > c_ts AND a_end >= c_end - {BLEED_NS}"


# What the sweep imports (0.2-0.4 s), started early by ``preload``.
SWEEP_MODULES = ("polars", "pyarrow.compute")
# polars' allocator (jemalloc) keeps the pages of freed arrays for reuse and hands them back over
# 0.5 + 1 s (polars' defaults: dirty_decay_ms 500, muzzy_decay_ms 1000; polars appends this
# variable's settings to them as it loads, and the later ones win): on x22 ~350 MB of the sweep's
# freed arrays were still resident when cpu_slices' join started, and that sum was the build's peak
# RSS (stages 1,020-1,073 MB; with this 898-912). Returned after 100 ms of disuse instead, the
# sweep's own reuse stays (at once, 0 ms: sweep +0.4 CPU-s of page faults). A user's value wins.
POLARS_ALLOCATOR = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:100,muzzy_decay_ms:0")


# Traces with fewer containers (cpu ops and annotations) than this nest by the range join, and
# import neither polars nor pyarrow. The sweep is the faster nest from ~5,000 containers once
# polars is imported (in-process, 5 runs each: 4,677 containers 0.081 s swept, 0.075 s joined;
# 6,415: 0.091 / 0.118; 14,388: 0.147 / 0.204; 23,980: 0.151 / 0.278), but the import costs a
# fresh process 0.2-0.4 CPU s and ~100 MB of RSS, more than the join's extra time below this.
# ``nest`` counts them (``_sweeps``) and starts the import before ``_axis``: on x22 it is done
# before the sweep asks for it (0.000 s waited, 4 in-process builds).
SWEEP_MIN = 10_000


def preload() -> None:
    """Start importing what the sweep needs on a background thread, while the caller's DuckDB
    statements run: ``nest`` calls it when the sweep will run; commands that never sweep import
    neither module. The sweep waits for the import to finish."""
    if "polars" not in sys.modules:  # its allocator reads the setting once, as it loads
        os.environ.setdefault(*POLARS_ALLOCATOR)
    background.imports(*SWEEP_MODULES)


def nest(con: duckdb.DuckDBPyConnection) -> None:
    """Create the working tables: ``_cpu`` (every CPU slice with its position on the
    axis), ``_anc`` (container ancestors: id, aid; the range join's also a_pos,
    a_end, akind, aname), which the attribution reads, and ``_nest``, every CPU
    slice's stack and children in ``_cpu``'s order, which ``build_tables`` reads
    (``_sweep``); or, on the range join's path, the containers' stacks
    ``_cstack`` and the containers (``_cont``) for the calls' parents, from
    which ``_nest_leaves`` makes ``_nest``. ``drop_work`` removes them. The sweep
    runs when there are at least ``SWEEP_MIN`` containers.
    """
    swept = _sweeps(con)
    if swept:
        preload()  # imported while _axis runs
    con.execute("SET prefer_range_joins = true")
    keyed = _axis(con)
    if keyed or not swept or not _sweep(con):
        con.execute(f"CREATE TEMP TABLE _cont AS SELECT * FROM _cpu WHERE kind IN {_in(_CONTAINER_KINDS)}")
        _nest_containers(con, keyed)


def build_tables(con: duckdb.DuckDBPyConnection, kind: str = "TABLE") -> None:
    """Create the linked tables (``kind``: TABLE, or TEMP TABLE for a read-only database) after ``nest``."""
    _nest_leaves(con)  # the range join's path: the calls' parents and _nest (the sweep made it already)
    _cpu_slices(con, kind)
    _runtime_calls(con, kind)
    for t in ("_nest", "_cstack", "_lstack", "_lparent", "_child"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    _gpu_ops(con, kind)
    _python_functions(con, kind)
    _collectives(con, kind)


def drop_work(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the working tables ``nest`` and ``build_tables`` leave."""
    for t in ("_cpu", "_anc", "_cont", "_cstack", "_lstack", "_lparent", "_child", "_nest"):
        con.execute(f"DROP TABLE IF EXISTS {t}")


def _sweeps(con) -> bool:
    """Whether the slices of ``con`` hold ``SWEEP_MIN`` containers or more, for the sweep to
    try (a count of the base tables: 0.01-0.025 s on x22's 1.5M events)."""
    return (
        con.execute(f"SELECT count(*) FROM slices WHERE kind IN {_in(_CONTAINER_KINDS)}").fetchall()[0][0] >= SWEEP_MIN
    )


def _exists(con, table: str) -> bool:
    """Whether this connection has the TEMP table ``table``."""
    return bool(con.execute("SELECT 1 FROM duckdb_tables() WHERE temporary AND table_name = ?", [table]).fetchall())


def _axis(con) -> bool:
    """Put every CPU slice on one integer axis, threads far apart.

    Returns True when the keys could not be spread apart (the lane must then
    be compared explicitly).
    """
    con.execute(
        f"""CREATE TEMP TABLE _lanes AS
            SELECT trace_id, pid, tid, row_number() OVER () AS lane
            FROM (SELECT DISTINCT trace_id, pid, tid FROM slices WHERE kind IN {_in(CPU_NEST_KINDS)})"""
    )
    con.execute(
        f"""CREATE TEMP TABLE _t0 AS
            SELECT trace_id, min(ts_ns) AS t0, max(end_ns) - min(ts_ns) AS span
            FROM slices WHERE kind IN {_in(CPU_NEST_KINDS)} GROUP BY trace_id"""
    )
    lanes, span = con.execute(
        "SELECT (SELECT count(*) FROM _lanes), (SELECT coalesce(max(span), 0) FROM _t0)"
    ).fetchall()[0]
    shift = 1 << (int(span) + BLEED_NS + 1).bit_length()
    # Lanes far apart make containment imply the same thread; with
    # astronomically many lanes x span the keys would overflow, and the
    # lane is then also compared (slower, but correct).
    spread = shift if (lanes + 1) * shift < (1 << 62) else 0
    # Sorted first, then numbered in that order (a streaming row_number): a
    # window ORDER BY would sort the wide rows again in one thread, 2-3x slower.
    # The table is stored in axis order, which the sweep reads.
    con.execute(
        f"""CREATE TEMP TABLE _cpu AS
            SELECT *, row_number() OVER () AS pos FROM (
                SELECT s.id, s.trace_id, l.lane, s.kind, s.name, s.ts_ns, s.dur_ns, s.end_ns,
                       l.lane * {spread} + (s.ts_ns - t.t0) AS k0,
                       l.lane * {spread} + (s.end_ns - t.t0) AS k1
                -- A slice without a pid or tid is a lane of its own (NULL keys are equal here: USING would drop it).
                FROM slices s
                JOIN _lanes l ON l.trace_id = s.trace_id AND l.pid IS NOT DISTINCT FROM s.pid
                             AND l.tid IS NOT DISTINCT FROM s.tid
                JOIN _t0 t ON t.trace_id = s.trace_id
                WHERE s.kind IN {_in(CPU_NEST_KINDS)}
                ORDER BY l.lane, s.ts_ns, s.dur_ns DESC, s.id
            )"""
    )
    con.execute("DROP TABLE _lanes")
    con.execute("DROP TABLE _t0")
    return spread == 0


def _nest_containers(con, keyed: bool) -> None:
    """All (container, enclosing container) pairs, and each container's stack."""
    same_lane = "AND a.lane = c.lane" if keyed else ""
    # The join holds only the two inequalities: given more, DuckDB may pick
    # other ones for the IEJoin and run hundreds of times slower.
    con.execute(
        f"""CREATE TEMP TABLE _pairs AS
            SELECT c.id, c.ts_ns AS c_ts, c.end_ns AS c_end, c.pos AS c_pos,
                   a.id AS aid, a.kind AS akind, a.name AS aname, a.pos AS a_pos, a.end_ns AS a_end
            FROM _cont c JOIN _cont a ON a.k0 <= c.k0 AND a.k1 >= c.k1 - {BLEED_NS} {same_lane}"""
    )
    con.execute(
        f"""CREATE TEMP TABLE _anc AS
            SELECT id, aid, akind, aname, a_pos, a_end FROM _pairs
            WHERE a_pos < c_pos AND {_ENCLOSES}"""
    )
    con.execute("DROP TABLE _pairs")
    con.execute(
        f"""CREATE TEMP TABLE _cstack AS
            SELECT id, count(*) AS depth,
                   arg_max(aid, {_INNER}) AS parent_id,
                   arg_min(aid, {_INNER}) AS root_id,
                   arg_max(aid, {_INNER}) FILTER (WHERE akind = 'cpu_op') AS op_id,
                   arg_min(aid, {_INNER}) FILTER (WHERE akind = 'cpu_op') AS top_op_id,
                   arg_max(aid, {_INNER}) FILTER (WHERE akind = 'user_annotation') AS annotation_id,
                   list(aid ORDER BY a_pos) FILTER (WHERE akind = 'user_annotation') AS annotation_ids,
                   list(aname ORDER BY a_pos) FILTER (WHERE akind = 'user_annotation') AS annotations
            FROM _anc GROUP BY id"""
    )


# The sweep's slices are split into this many groups of about equal rows (between threads, or
# between top-level slices of one thread), each swept on a thread of its own (polars releases the
# GIL as it computes). x22 (two threads of ~264k containers),
# stages on a quiet 2-core machine, 4 alternating pairs: 6.65 -> 6.41 s; the sweep alone 0.70-0.82
# -> 0.49-0.53 s wall. Statements beside the sweep (the linked tables that do not read it, the rules)
# then saved nothing measurable (6.44 s either way), so nothing runs beside it any more.
SWEEP_PARTS = 2


def _sweep(con) -> bool:
    """Nest the containers in one ordered pass; False (nothing created) when they do not nest cleanly.

    On the axis (threads apart, slices in ``pos`` order), the slices open at
    a slice's start are the earlier ones whose end lies beyond it: their
    number is the slice's index minus the ends at or before its start (a
    zero-length slice at the same instant closes only after it opens). When
    every slice lies wholly inside every slice open at its start (no partial
    overlap, no overhang), those open slices are exactly its ancestors as
    ``_nest_containers`` defines them (the overhang allowance then never
    applies) and they form a chain: the ancestor at depth ``d`` is the last
    slice of depth ``d`` opened before it. That condition is checked here
    for every slice (its parent encloses it, one level up); a trace where it
    fails anywhere is nested by the range join instead. The stacks come from
    the same (slice, ancestor) rows that ``_anc`` holds, which list each
    slice's ancestors outermost first; a call's parent from binary searches
    (``_sweep_leaves``).

    Nothing nests across threads or across a gap on one thread where no
    slice is open, so the slices are swept in groups cut there
    (``_sweep_groups``), at once; this thread stores what they give, group
    by group, so ``_nest`` is in ``_cpu``'s order.
    """
    background.wait(*SWEEP_MODULES)
    import polars as pl

    # A plain scan returns _cpu in the order it was stored, which is axis order (an ORDER BY would sort again).
    df = con.sql(
        f"""SELECT id, lane, k0, k1, pos, kind = 'cpu_op' AS op, kind = 'user_annotation' AS ann,
                   CASE WHEN kind = 'user_annotation' THEN name END AS name
            FROM _cpu WHERE kind IN {_in(_CONTAINER_KINDS)}"""
    ).pl()
    leaves = con.sql(f"SELECT id, lane, pos, k0, k1 FROM _cpu WHERE kind IN {_in(LAUNCH_KINDS)}").pl()
    made: set[str] = set()

    def store(name: str, rows: pa.Table) -> None:
        _to_table(con, name, rows, append=name in made)
        made.add(name)

    parts = _sweep_groups(df, leaves, SWEEP_PARTS)
    del df, leaves
    # One queue per group, read in group order: _nest is stored in _cpu's order, and what a later
    # group gives waits in its queue until the groups before it are stored.
    queues: list[queue.Queue] = [queue.Queue() for _ in parts]
    with concurrent.futures.ThreadPoolExecutor(len(parts), thread_name_prefix="tracekit-sweep") as pool:
        jobs = []
        for q, (cont, calls) in zip(queues, parts):
            give, done = _queued(q)
            jobs.append(pool.submit(_swept, pl, cont, calls, give))
            jobs[-1].add_done_callback(done)
        del parts, cont, calls
        for q in queues:
            while (item := q.get()) is not None:
                store(*item)
                del item
        swept = [job.result() for job in jobs]
    if all(swept):
        return True
    for name in made:  # a group that did not nest cleanly: the range join nests them all
        con.execute(f"DROP TABLE {name}")
    return False


def _queued(q: queue.Queue) -> tuple[Callable[[str, pa.Table], None], Callable[[concurrent.futures.Future], None]]:
    """What a sweep group gives, put on ``q``; and its job's done-callback, which ends ``q`` (None)."""
    return (lambda name, rows: q.put((name, rows))), (lambda _: q.put(None))


def _sweep_groups(df, leaves, parts: int) -> list[tuple[Any, Any]]:
    """The containers ``df`` and the calls ``leaves`` (both in axis order) in up to ``parts`` groups
    of consecutive rows, cut where nothing before the cut is open at its start, nearest to equal
    numbers of containers.

    A container may start a group when every container before it has ended before it starts (on
    the axis: a gap on its thread, which holds at every thread boundary when the lanes' keys are
    spread apart) or when it is the first of its thread: no container or call at or after it can
    then have an ancestor before it, so each group nests on its own. Calls go with the group
    their position falls in. A trace whose CPU work is one thread is split too, between its
    top-level slices, not only a trace of several threads."""
    n = df.height
    if n == 0:
        return [(df, leaves)]
    lane, pos = df["lane"], df["pos"]
    before = df["k1"].cum_max().shift(1)  # the latest end among the containers before each one
    free = ((before < df["k0"]) | (lane != lane.shift(1))).fill_null(True)
    starts = free.arg_true()  # where a group may start: row 0 and every clean cut
    cuts = []
    for i in range(1, parts):
        target = i * n // parts
        j = int(starts.search_sorted(target, side="left"))
        near = [int(starts[k]) for k in (j - 1, j) if 0 <= k < starts.len()]
        cuts.append(min(near, key=lambda at: (abs(at - target), at)))
    bounds = sorted({0, n, *cuts})
    groups = []
    for a, b in zip(bounds, bounds[1:]):
        la = 0 if a == 0 else int(leaves["pos"].search_sorted(pos[a], side="left"))
        lb = leaves.height if b == n else int(leaves["pos"].search_sorted(pos[b], side="left"))
        groups.append((df[a:b], leaves[la:lb]))
    return groups


def _swept(pl, df, leaves, put: Callable[[str, pa.Table], object]) -> bool:
    """Give ``put`` the sweep's tables (``_anc``, then ``_nest`` in parts of ``NEST_ROWS`` rows,
    in order) from the containers ``df`` and the calls ``leaves`` (both from ``_cpu``); False
    (none given) when the containers do not nest cleanly. It uses no connection: ``_sweep`` may
    run it on another thread."""
    n = df.height
    if n == 0:
        return False
    if not df["pos"].is_sorted():
        df = df.sort("pos")
    k0, k1, lane, ids = df["k0"], df["k1"], df["lane"], df["id"]
    idx = pl.int_range(n, dtype=pl.Int64, eager=True)
    # Open at each start: the earlier slices, less the ends at or before it, plus the zero-length
    # slices starting there from this one on (counted as ended, but not yet opened).
    zero = (k0 == k1).cast(pl.Int64)
    ended = k1.sort().search_sorted(k0, side="right").cast(pl.Int64)
    zero_after = k0.filter(zero == 1).search_sorted(k0, side="right").cast(pl.Int64) - (zero.cum_sum() - zero)
    depth = idx - ended + zero_after
    del zero, ended, zero_after
    keys = depth * n + idx
    order = keys.arg_sort()
    keys, rows = keys.gather(order), idx.gather(order)
    del order

    def at_level(level: pl.Series, at: pl.Series) -> pl.Series:
        """Index of the last slice of depth ``level`` opened before slice ``at`` (-1: none)."""
        j = keys.search_sorted(level * n + at, side="left").cast(pl.Int64) - 1
        return pl.select(pl.when(j >= 0).then(rows.gather(j.clip(0))).otherwise(-1)).to_series()

    nested = depth > 0
    c, dc = idx.filter(nested), depth.filter(nested)  # the nested slices and their depths
    # Every (slice, ancestor) pair, one per level above the slice: by slice, outermost first.
    lv = pl.DataFrame({"c": c, "d": dc}).with_columns(lvl=pl.int_ranges(0, "d")).explode("lvl")
    al = at_level(lv["lvl"], lv["c"])
    cl = lv["c"]
    del lv
    p = al.gather(dc.cum_sum() - 1)  # the last of each slice's rows: one level up
    pg = p.clip(0)
    ok = (
        (p >= 0)
        & (depth.gather(pg) == dc - 1)
        & (lane.gather(pg) == lane.filter(nested))
        & (k1.gather(pg) >= k1.filter(nested))
        & (k1.gather(pg) > k0.filter(nested))
    )
    if (depth < 0).any() or not ok.all():
        return False
    del ok, nested
    put("_anc", pl.DataFrame({"id": ids.gather(cl), "aid": ids.gather(al)}).to_arrow())
    up = _stacks(pl, df, c, dc, pg, al, cl)
    del al, cl
    child_l, parent_l, child = _sweep_leaves(pl, df, leaves, depth, at_level, c, pg)
    for part in _nest_rows(pl, df, depth, leaves, child_l, parent_l, child, up):
        put("_nest", part)
        del part
    return True


def _stacks(pl, cont, c, dc, pg, al, cl) -> dict:
    """Each container's stack as a slice below it inherits it (``_up``), from the nested containers
    ``c`` (indexes of ``cont``) at depths ``dc`` with parents ``pg`` and their ancestors ``al`` (each
    slice's ``dc`` rows, outermost first; ``cl`` the slice of each row)."""
    # Each slice's rows are one run, from ``start`` to ``last``.
    start = dc.cum_sum() - dc
    last = start + dc - 1
    row = pl.int_range(al.len(), dtype=pl.Int64, eager=True)

    def inner_outer(kind: pl.Series) -> tuple[pl.Series, pl.Series]:
        """Per slice: the indexes of its innermost and outermost ancestors where ``kind`` (NULL: none)."""
        hit = pl.select(pl.when(kind.gather(al)).then(row)).to_series()
        inner, outer = hit.forward_fill().gather(last), hit.backward_fill().gather(start)
        return at(inner, inner >= start), at(outer, outer <= last)

    def at(r: pl.Series, found: pl.Series) -> pl.Series:
        return pl.select(pl.when(found).then(al.gather(r.fill_null(0)))).to_series()

    op, top_op = inner_outer(cont["op"])
    ann, _ = inner_outer(cont["ann"])
    return _up(pl, cont, c, pg, al.gather(start), op, top_op, ann, al, cl)


def _up(pl, cont, c, pg, root, op, top_op, ann, al, cl) -> dict:
    """What a slice inherits from its parent container ``i`` (indexes of ``cont``), i.e. the
    ancestors-or-self of ``i``: its root (``i`` at top level), innermost and outermost ``cpu_op`` and
    innermost annotation (NULL: none), and its annotations, outermost first (``aos``, cut by
    ``aos_offsets``: one list per container and one more, empty, for a slice with no parent).
    ``c`` are the nested containers, with parents ``pg``, roots ``root`` and ancestors of each kind
    ``op``, ``top_op``, ``ann`` (indexes); ``al``/``cl`` the (ancestor, slice) rows."""
    n = cont.height
    idx = pl.int_range(n, dtype=pl.Int64, eager=True)
    is_op, is_ann = cont["op"], cont["ann"]

    def spread(values: pl.Series, default: pl.Series | None = None) -> pl.Series:
        """``values`` of the nested containers as a column of every container (``default`` elsewhere)."""
        out = pl.repeat(None, n, dtype=pl.Int64, eager=True) if default is None else default.clone()
        return out.scatter(c, values)

    mine = pl.select(pl.when(is_op).then(idx)).to_series()
    # The annotations of each container's ancestors-or-self: its ancestors' (outermost first), then itself.
    ann_row = is_ann.gather(al)
    key = pl.concat([cl.filter(ann_row) * 2, idx.filter(is_ann) * 2 + 1])
    order = key.arg_sort()
    aos = pl.concat([al.filter(ann_row), idx.filter(is_ann)]).gather(order)
    owner = key.gather(order) // 2
    return {
        "parent": spread(pg),
        "root": spread(root, idx),
        "op": pl.select(pl.when(is_op).then(idx).otherwise(spread(op))).to_series(),
        "top_op": pl.select(pl.coalesce(spread(top_op), mine)).to_series(),
        "ann": pl.select(pl.when(is_ann).then(idx).otherwise(spread(ann))).to_series(),
        "aos": aos,
        "aos_offsets": owner.search_sorted(pl.int_range(n + 2, dtype=pl.Int64, eager=True), side="left").cast(pl.Int32),
    }


# ``_nest`` is made and stored in parts of this many rows: the whole table at once (x22: 865k
# rows, ~110 MB of Arrow arrays, ~120 MB once copied into DuckDB) was held twice at the peak.
NEST_ROWS = 1 << 18


def _nest_rows(pl, cont, depth, leaves, child_l, parent_l, child, up: dict) -> Iterator[pa.Table]:
    """``_nest``: every CPU slice's stack and children as ``cpu_slices`` stores them, in ``_cpu``'s order
    (parts of ``NEST_ROWS`` rows).

    ``cont``/``leaves`` are the containers and the calls, ``depth`` the containers' depths;
    ``child_l``/``parent_l`` each call with a parent and that parent (indexes), ``child`` the
    children per container (``p``, ``children``, ``child_ns``), ``up`` what ``_up`` gives.
    A slice inherits its parent's ancestors-or-self: the parent's root, innermost and
    outermost ``cpu_op``, innermost annotation and annotations; no parent: none of them,
    depth 0 and itself as root.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n, m = cont.height, leaves.height
    ids = cont["id"]
    leaf_parent = pl.repeat(None, m, dtype=pl.Int64, eager=True).scatter(child_l, parent_l)
    none = pl.zeros(m, dtype=pl.Int64, eager=True)
    children = pl.zeros(n, dtype=pl.Int64, eager=True).scatter(child["p"], child["children"])
    child_ns = pl.zeros(n, dtype=pl.Int64, eager=True).scatter(child["p"], child["child_ns"])
    children, child_ns = pl.concat([children, none]), pl.concat([child_ns, none])
    # Containers and calls together, in axis order.
    order = pl.concat([cont["pos"], leaves["pos"]]).arg_sort()
    own_all = pl.concat([ids, leaves["id"]]).gather(order)
    p_all = pl.concat([up["parent"], leaf_parent]).gather(order)
    del leaf_parent, none
    # Each slice's annotations: its parent's list (list n is the empty one) of container indexes,
    # then their ids and names (polars gathers the lists ~10x faster than pyarrow's take on x22).
    lists = pl.from_arrow(pa.ListArray.from_arrays(up["aos_offsets"].to_arrow(), up["aos"].to_arrow()))
    for start in range(0, n + m, NEST_ROWS):
        o, own, p = order.slice(start, NEST_ROWS), own_all.slice(start, NEST_ROWS), p_all.slice(start, NEST_ROWS)
        has = p.is_not_null()
        pz = p.fill_null(0)
        taken = lists.gather(p.fill_null(n)).to_arrow()
        offsets = pc.subtract(taken.offsets, taken.offsets[0])
        members = pl.from_arrow(taken.flatten())
        yield pa.table(
            {
                "id": own.to_arrow(),
                "depth": pl.select(pl.when(has).then(depth.gather(pz) + 1).otherwise(0))
                .to_series()
                .cast(pl.Int32)
                .to_arrow(),
                "parent_id": ids.gather(p).to_arrow(),
                "root_id": pl.select(pl.when(has).then(ids.gather(up["root"].gather(pz))).otherwise(own))
                .to_series()
                .to_arrow(),
                "op_id": ids.gather(up["op"].gather(p)).to_arrow(),
                "top_op_id": ids.gather(up["top_op"].gather(p)).to_arrow(),
                "annotation_id": ids.gather(up["ann"].gather(p)).to_arrow(),
                "annotation_ids": pa.ListArray.from_arrays(offsets, ids.gather(members).to_arrow()),
                "annotations": pa.ListArray.from_arrays(offsets, cont["name"].gather(members).to_arrow()),
                "children": children.gather(o).cast(pl.Int32).to_arrow(),
                "child_ns": child_ns.gather(o).to_arrow(),
            }
        )


def _to_table(con, name: str, rows: pa.Table, append: bool = False) -> None:
    """Create the TEMP table ``name`` from the Arrow table ``rows``, or add them to it (``append``)."""
    con.register(f"{name}_rows", rows)
    if append:
        con.execute(f"INSERT INTO {name} SELECT * FROM {name}_rows")
    else:
        con.execute(f"CREATE TEMP TABLE {name} AS SELECT * FROM {name}_rows")
    con.unregister(f"{name}_rows")


def _sweep_leaves(pl, cont, leaves, depth, at_level, cc, cp) -> tuple:
    """The calls' parents and every container's children, from the sweep's arrays: each call with a
    parent and that parent (indexes of ``leaves`` and ``cont``), and per parent ``p`` its
    ``children`` and the time they cover of it (``child_ns``).

    A call's parent is the innermost of the last container opened before it
    (on its thread) and that container's ancestors that encloses it
    (``_ENCLOSES``), as ``_nest_leaves`` defines it. ``cc`` are the nested
    containers and ``cp`` their parents, as indexes of ``cont``.
    """
    k0, k1 = cont["k0"], cont["k1"]
    lk0, lk1 = leaves["k0"], leaves["k1"]
    j = cont["pos"].search_sorted(leaves["pos"], side="left").cast(pl.Int64) - 1
    jg = j.clip(0)
    l_idx = pl.int_range(leaves.height, dtype=pl.Int64, eager=True)
    same = (j >= 0) & (cont["lane"].gather(jg) == leaves["lane"])

    def encloses(a: pl.Series, at: pl.Series) -> pl.Series:
        ak1 = k1.gather(a.clip(0))
        return (a >= 0) & (ak1 > lk0.gather(at)) & (ak1 >= lk1.gather(at) - BLEED_NS)

    # Most calls lie inside the last container opened before them; the others are in one of its
    # ancestors (levels 0 .. d-1), the innermost that encloses them: the deepest (a chain's ends
    # only grow outwards), the last of each call's rows (consecutive, in level order).
    inside_last = same & encloses(jg, l_idx)
    up = pl.DataFrame({"l": l_idx, "j": jg, "d": depth.gather(jg)}).filter(same & ~inside_last & (pl.col("d") > 0))
    up = up.with_columns(lvl=pl.int_ranges(0, "d")).explode("lvl")
    up = pl.DataFrame({"l": up["l"], "a": at_level(up["lvl"], up["j"])})
    up = up.filter(encloses(up["a"], up["l"]))
    up = up.filter(pl.col("l") != pl.col("l").shift(-1, fill_value=-1))
    child_l, parent_l = pl.concat([l_idx.filter(inside_last), up["l"]]), pl.concat([jg.filter(inside_last), up["a"]])
    # Children and the time they cover of their parent (same thread: the axis' differences are ns).
    pc = pl.concat([cp, parent_l])  # each child's parent
    ns = pl.select(
        pl.min_horizontal(pl.concat([k1.gather(cc), lk1.gather(child_l)]), k1.gather(pc))
        - pl.max_horizontal(pl.concat([k0.gather(cc), lk0.gather(child_l)]), k0.gather(pc))
    ).to_series()
    child = (
        pl.DataFrame({"p": pc, "ns": ns})
        .group_by("p")
        .agg(children=pl.len().cast(pl.Int64), child_ns=pl.col("ns").sum())
    )
    return child_l, parent_l, child


def inside(spans: str, key: str, start: str = "k0", end: str = "k1") -> str:
    """SQL: ``(x, key, pos)`` for every CPU slice ``x`` (at ``pos``) inside a span of ``spans`` on its thread.

    ``spans`` has ``key``, ``lane`` and the span's ends on the axis (``start``, ``end``); a
    slice is inside when it starts within the span and ends at most ``BLEED_NS`` after it.

    ``_cpu`` is numbered (``pos``) in axis order, lane by lane, by start: the slices that
    start within a span are one run of numbers, from the first slice starting at or after
    its start to the last starting by its end (two ASOF joins, then the ends of their ties).
    The run is joined by its numbers (equality) and the ends checked. An IEJoin of the spans
    against every slice took 4.5 s for 4,100 SDPA blocks over 1.0M slices (a tiny Llama
    tiled 41x, 372 MB); the run's numbers are unnested per span, so the work is the pairs.
    """
    return f"""WITH s AS MATERIALIZED (
                   SELECT {key} AS key, lane, {start} AS s0, {end} + {BLEED_NS} AS s1 FROM {spans}
               ),
               lo AS (SELECT s.key, s.lane, x.k0 FROM s ASOF JOIN _cpu x ON s.lane = x.lane AND s.s0 <= x.k0),
               hi AS (SELECT s.key, s.lane, x.k0 FROM s ASOF JOIN _cpu x ON s.lane = x.lane AND s.s1 >= x.k0),
               -- The ends of each run: the first slice of the lo key's ties, the last of the hi key's.
               lo_pos AS (SELECT lo.key, min(x.pos) AS p_lo FROM lo JOIN _cpu x USING (lane, k0) GROUP BY lo.key),
               hi_pos AS (SELECT hi.key, max(x.pos) AS p_hi FROM hi JOIN _cpu x USING (lane, k0) GROUP BY hi.key),
               p AS (SELECT key, unnest(range(p_lo, p_hi + 1)) AS pos FROM lo_pos JOIN hi_pos USING (key) WHERE p_lo <= p_hi)
               -- (Every slice of a run is on the span's lane and starts within it: only its end is checked.)
               SELECT x.id AS x, p.key, x.pos
               FROM p JOIN s USING (key) JOIN _cpu x USING (pos)
               WHERE x.k1 <= s.s1"""


def _nest_leaves(con) -> None:
    """Runtime/driver calls: parent = innermost enclosing container, and ``_nest`` from the stacks
    (the range join's path: the sweep made ``_nest`` already)."""
    if _exists(con, "_nest"):
        return
    _leaf_parents(con)
    con.execute("DROP TABLE IF EXISTS _cont")
    # A call inherits its parent's stack, the parent included.
    con.execute(
        """CREATE TEMP TABLE _lstack AS
           SELECT l.id, coalesce(s.depth, 0) + 1 AS depth, l.parent_id,
                  coalesce(s.root_id, l.parent_id) AS root_id,
                  CASE WHEN l.parent_op THEN l.parent_id ELSE s.op_id END AS op_id,
                  coalesce(s.top_op_id, CASE WHEN l.parent_op THEN l.parent_id END) AS top_op_id,
                  CASE WHEN l.parent_annotation THEN l.parent_id ELSE s.annotation_id END AS annotation_id,
                  CASE WHEN l.parent_annotation THEN list_append(coalesce(s.annotation_ids, []), l.parent_id)
                       ELSE s.annotation_ids END AS annotation_ids,
                  CASE WHEN l.parent_annotation THEN list_append(coalesce(s.annotations, []), l.parent_name)
                       ELSE s.annotations END AS annotations
           FROM _lparent l LEFT JOIN _cstack s ON s.id = l.parent_id"""
    )
    con.execute("DROP TABLE _lparent")
    _nest_from_stacks(con)


def _nest_from_stacks(con) -> None:
    """``_nest`` from the range join's stacks (``_cstack``, ``_lstack``), as ``_nest_rows`` gives it."""
    con.execute(
        """CREATE TEMP TABLE _nest AS
           WITH st AS (SELECT * FROM _cstack UNION ALL SELECT * FROM _lstack),
           ch AS (
               SELECT s.parent_id AS id, count(*) AS children,
                      sum(least(c.end_ns, p.end_ns) - greatest(c.ts_ns, p.ts_ns)) AS child_ns
               FROM st s JOIN _cpu c ON c.id = s.id JOIN _cpu p ON p.id = s.parent_id
               GROUP BY s.parent_id
           )
           SELECT c.id, coalesce(st.depth, 0)::INTEGER AS depth, st.parent_id, coalesce(st.root_id, c.id) AS root_id,
                  st.op_id, st.top_op_id, st.annotation_id, coalesce(st.annotation_ids, []) AS annotation_ids,
                  coalesce(st.annotations, []) AS annotations, coalesce(ch.children, 0)::INTEGER AS children,
                  coalesce(ch.child_ns, 0)::BIGINT AS child_ns
           FROM _cpu c LEFT JOIN st USING (id) LEFT JOIN ch USING (id)
           ORDER BY c.pos"""
    )


def _leaf_parents(con) -> None:
    """``_lparent``: each call's parent (and its kind and name), by an ASOF join and the last container's ancestors."""
    con.execute(
        f"""CREATE TEMP TABLE _prev AS
            SELECT l.id, l.ts_ns AS c_ts, l.end_ns AS c_end, l.pos AS c_pos, c.id AS x
            FROM (SELECT * FROM _cpu WHERE kind IN {_in(LAUNCH_KINDS)}) l
            ASOF JOIN _cont c ON l.lane = c.lane AND c.pos < l.pos"""
    )
    # The enclosing container is the last one opened before the call, or one
    # of that container's ancestors (when the last one already closed).
    con.execute(
        f"""CREATE TEMP TABLE _lparent AS
            SELECT l.id, l.parent_id, p.kind = 'cpu_op' AS parent_op, p.kind = 'user_annotation' AS parent_annotation,
                   p.name AS parent_name
            FROM (
                SELECT id, arg_max(aid, {_INNER}) AS parent_id
                FROM (
                    SELECT p.id, p.c_ts, p.c_end, c.id AS aid, c.pos AS a_pos, c.end_ns AS a_end
                    FROM _prev p JOIN _cont c ON c.id = p.x
                    UNION ALL
                    SELECT p.id, p.c_ts, p.c_end, a.aid, a.a_pos, a.a_end
                    FROM _prev p JOIN _anc a ON a.id = p.x
                )
                WHERE {_ENCLOSES}
                GROUP BY id
            ) l JOIN _cont p ON p.id = l.parent_id"""
    )
    con.execute("DROP TABLE _prev")


def _cpu_slices(con, kind: str = "TABLE") -> None:
    parse, typed = fields.typed(fields.OP, "args")
    # From events, not its view slices, though only slices join: the estimate of every event
    # makes _nest (integers and the annotation lists) the join's hashed side. The estimate of
    # the slices is far below their number, and DuckDB hashed the wide rows instead (x22, one
    # thread: the join 0.47-0.54 s hashing _nest, 0.61-0.90 s hashing the slices).
    con.execute(
        f"""
        CREATE {kind} cpu_slices AS
        SELECT s.id, s.trace_id, s.kind, s.name, s.pid, s.tid, s.ts_ns, s.dur_ns, s.end_ns,
               n.depth::INTEGER AS depth, n.parent_id, n.root_id, n.children::INTEGER AS children,
               greatest(s.dur_ns - n.child_ns, 0)::BIGINT AS self_ns,
               n.op_id, n.top_op_id, n.annotation_id, n.annotation_ids, n.annotations,
               s.external_id, s.correlation, {typed}
        FROM (SELECT *, CASE WHEN kind IN ('cpu_op', 'user_annotation') THEN {parse.replace(" AS a", " END AS a")}
              FROM events) s
        JOIN _nest n USING (id)
        """
    )


def _runtime_calls(con, kind: str = "TABLE") -> None:
    # The ac2g flow starts: per correlation, whether any exists and the
    # (thread, time) each starts at; joined, not EXISTS-probed twice per call.
    con.execute(
        """
        CREATE TEMP TABLE _sflow AS
        SELECT DISTINCT trace_id, TRY_CAST(flow_id AS BIGINT) AS correlation, pid, tid, ts_ns
        FROM flows WHERE kind = 'ac2g' AND ph = 's'
        """
    )
    parse, typed = fields.typed(fields.RUNTIME, "args")
    # A call's stack is its row of _nest (_cpu's order), not read back from cpu_slices. Each join
    # hashes its right side, the narrower: planned by estimates, the join with the ops' names hashed
    # the wide calls (the calls are underestimated). x22, two threads: the statement 1.25-1.50 ->
    # 0.97-1.18 CPU-s in the build (loaded machine).
    _right_side_hashed(
        con,
        f"""
        CREATE {kind} runtime_calls AS
        WITH c AS MATERIALIZED (
            SELECT n.id, n.op_id, n.top_op_id, n.annotation_id, n.annotations
            FROM _cpu POSITIONAL JOIN _nest n
            -- The rows pair by position: a _nest out of _cpu's order fails here, rather than giving calls no stack.
            WHERE _cpu.kind IN {_in(LAUNCH_KINDS)}
              AND CASE WHEN _cpu.id = n.id THEN true ELSE error('internal: _nest is not in _cpu''s order') END
        )
        SELECT s.id, s.trace_id, s.kind, s.name AS api, s.pid, s.tid, s.ts_ns, s.dur_ns, s.end_ns,
               s.correlation, s.external_id, {typed},
               c.op_id AS cpu_op_id, op.name AS cpu_op_name, c.top_op_id, top.name AS top_op_name,
               c.annotation_id, c.annotations[-1] AS annotation_name, coalesce(c.annotations, []) AS annotations,
               s.name ILIKE '%graphlaunch%' AS graph_launch,
               -- NULL: no ac2g flow has this correlation; false: flows exist, none starts at this call.
               CASE WHEN fc.correlation IS NOT NULL THEN fm.correlation IS NOT NULL END AS flow_matches
        FROM (SELECT *, {parse} FROM slices WHERE kind IN {_in(LAUNCH_KINDS)}) s
        LEFT JOIN c USING (id)
        -- Only the ops some call names: the names of every CPU slice would be hashed.
        LEFT JOIN (SELECT id, name FROM _cpu WHERE id IN (SELECT op_id FROM c)) op ON op.id = c.op_id
        LEFT JOIN (SELECT id, name FROM _cpu WHERE id IN (SELECT top_op_id FROM c)) top ON top.id = c.top_op_id
        LEFT JOIN (SELECT DISTINCT trace_id, correlation FROM _sflow) fc
               ON fc.trace_id = s.trace_id AND fc.correlation = s.correlation
        LEFT JOIN _sflow fm
               ON fm.trace_id = s.trace_id AND fm.correlation = s.correlation
              AND fm.pid = s.pid AND fm.tid = s.tid AND fm.ts_ns = s.ts_ns
        """,
    )
    con.execute("DROP TABLE _sflow")


def _right_side_hashed(con, sql: str) -> None:
    """Run ``sql`` with each join hashing the side the SQL puts on its right (DuckDB's build side),
    whatever the planner estimates: for a statement whose estimates are known to be wrong (a
    filtered scan of events is estimated at a fifth of its rows or less)."""
    before = con.execute("SELECT current_setting('disabled_optimizers')").fetchall()[0][0]
    con.execute(f"SET disabled_optimizers = {literal(','.join(filter(None, (before, 'build_side_probe_side'))))}")
    try:
        con.execute(sql)
    finally:
        con.execute(f"SET disabled_optimizers = {literal(before)}")


def _gpu_ops(con, kind: str = "TABLE") -> None:
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
    parse, typed = fields.typed(fields.GPU, "args")
    cause = orphan_cause_sql("l.launch_id IS NOT NULL", "g.correlation")
    con.execute(
        f"""
        CREATE {kind} gpu_ops AS
        SELECT g.id, g.trace_id, g.kind, g.name,
               coalesce(g.device, TRY_CAST(g.pid AS INTEGER)) AS device,
               coalesce(g.stream, TRY_CAST(g.tid AS BIGINT)) AS stream,
               g.pid, g.tid, g.ts_ns, g.dur_ns, g.end_ns, g.correlation, g.external_id,
               l.launch_id, r.api AS launch_api, r.tid AS launch_tid, r.ts_ns AS launch_ts_ns,
               coalesce({cause} = 'launched_before_trace', false) AS orphan, {cause} AS orphan_cause,
               coalesce(r.graph_launch, false) AS via_graph,
               coalesce(l.candidates, 0)::INTEGER AS launch_candidates,
               r.cpu_op_id, r.cpu_op_name, r.top_op_id, r.top_op_name,
               r.annotation_id, r.annotation_name, coalesce(r.annotations, []) AS annotations,
               g.grid, g.block, g.registers_per_thread, g.shared_memory_bytes, g.blocks_per_sm,
               g.warps_per_sm, g.est_occupancy_pct, g.bytes, g.memory_bandwidth_gbps
        FROM (SELECT id, trace_id, kind, name, pid, tid, ts_ns, dur_ns, end_ns, correlation, external_id, {typed}
              FROM (SELECT *, {parse} FROM slices WHERE kind IN {_in(GPU_OP_KINDS)})) g
        LEFT JOIN _link l ON l.id = g.id
        LEFT JOIN runtime_calls r ON r.id = l.launch_id
        """
    )
    con.execute("DROP TABLE _link")


def _python_functions(con, kind: str = "TABLE") -> None:
    parse, typed = fields.typed(fields.PYTHON, "args")
    con.execute(
        f"""
        CREATE {kind} python_functions AS
        WITH f AS (
            SELECT id, trace_id, name, pid, tid, ts_ns, dur_ns, end_ns, {typed}
            FROM (SELECT *, {parse} FROM slices WHERE kind = 'python_function')
        )
        -- Python ids repeat in long recordings and merged files: the parent is the frame of that id
        -- whose time contains the child's (the innermost, if several), so each frame keeps one row.
        SELECT f.*, p.id AS parent_id
        FROM f LEFT JOIN f p
          ON p.trace_id = f.trace_id AND p.pid = f.pid AND p.tid = f.tid AND p.python_id = f.python_parent_id
             AND p.id <> f.id AND p.ts_ns <= f.ts_ns AND f.end_ns <= p.end_ns
        QUALIFY row_number() OVER (PARTITION BY f.id ORDER BY p.ts_ns DESC NULLS LAST, p.dur_ns, p.id) = 1
        """
    )


def _collectives(con, kind: str = "TABLE") -> None:
    parse, typed = fields.typed(fields.COLLECTIVE, "args")
    con.execute(
        f"""
        CREATE {kind} collectives AS
        SELECT id, trace_id, kind, name, pid, tid, ts_ns, dur_ns, end_ns, {typed}
        FROM (SELECT *, {parse} FROM slices
              WHERE kind IN ('cpu_op', 'kernel') AND contains(CAST(args AS VARCHAR), '"Collective name"'))
        """
    )
