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
import contextlib
import queue
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import duckdb

from tracekit.common import background, sqlmodules
from tracekit.common.sqltext import in_list as _in
from tracekit.common.sqltext import literal
from tracekit.schema import fields
from tracekit.schema.kinds import CPU_NEST_KINDS, GPU_OP_KINDS, LAUNCH_KINDS

if TYPE_CHECKING:
    import pyarrow as pa

# A child may end a few hundred ns after its parent (clock skew between the
# profiler's callbacks); containment allows this much overhang.
BLEED_NS = 1000

# The tables ``build`` creates.
TABLES = ("cpu_slices", "runtime_calls", "gpu_ops", "python_functions", "collectives")

_CONTAINER_KINDS = tuple(k for k in CPU_NEST_KINDS if k not in LAUNCH_KINDS)


# What the sweep imports (a noticeable fraction of a second), started early by ``preload``.
SWEEP_MODULES = ("polars", "pyarrow.compute")
# Traces with fewer containers (cpu ops and annotations) than this nest by the range join, and
# import neither polars nor pyarrow. The sweep is the faster nest from a few thousand containers
# once polars is imported, but the import costs a fresh process more CPU and memory than the
# join's extra time below this. ``nest`` counts them (``_sweeps``) and starts the import before
# ``_axis``, so on large traces it is done before the sweep asks for it (bench/HISTORY.md).
SWEEP_MIN = 10_000


def preload() -> None:
    """Start importing what the sweep needs on a background thread, while the caller's DuckDB
    statements run: ``nest`` calls it when the sweep will run; commands that never sweep import
    neither module. The sweep waits for the import to finish."""
    background.imports(*SWEEP_MODULES)


def nest(con: duckdb.DuckDBPyConnection) -> None:
    """Create the working tables: ``_cpu`` (every CPU slice with its position on the
    axis), ``_anc`` (container ancestors: id, aid; the range join's also a_pos,
    a_end, akind, aname), which the attribution reads, and ``_nest``, every CPU
    slice's stack and children in ``_cpu``'s order, which ``build_tables`` reads
    (``_sweep``); or, on the range join's path, the containers' stacks
    ``_cstack`` and the containers (``_cont``) for the calls' parents, from
    which ``_nest_leaves`` makes ``_nest``. The build drops them when it ends (``sqlmodules.drop_private``). The sweep
    runs when there are at least ``SWEEP_MIN`` containers.
    """
    swept = _sweeps(con)
    if swept:
        preload()  # imported while _axis runs
    con.execute("SET prefer_range_joins = true")
    keyed = _axis(con)
    if keyed or not swept or not _sweep(con):
        sqlmodules.run(con, "model/containers", kinds=_CONTAINER_KINDS)
        sqlmodules.run(con, "model/nest_containers", bleed=BLEED_NS, same_lane="AND a.lane = c.lane" if keyed else "")


def build_tables(con: duckdb.DuckDBPyConnection, kind: str = "TABLE") -> None:
    """Create the linked tables (``kind``: TABLE, or TEMP TABLE for a read-only database) after ``nest``."""
    _nest_leaves(con)  # the range join's path: the calls' parents and _nest (the sweep made it already)
    sqlmodules.run(con, "model/cpu_slices", table=kind, **_typed_args(fields.OP))
    _right_side_hashed(
        con,
        lambda: sqlmodules.run(
            con, "model/runtime_calls", table=kind, launch_kinds=LAUNCH_KINDS, **_typed_args(fields.RUNTIME)
        ),
    )
    for t in ("_nest", "_cstack", "_lstack"):
        con.execute(f"DROP TABLE IF EXISTS {t}")
    sqlmodules.run(con, "model/gpu_ops", table=kind, gpu_kinds=GPU_OP_KINDS, **_typed_args(fields.GPU))
    sqlmodules.run(con, "model/python_functions", table=kind, **_typed_args(fields.PYTHON))
    sqlmodules.run(con, "model/collectives", table=kind, **_typed_args(fields.COLLECTIVE))


def _typed_args(declared: list[fields.Field]) -> dict[str, object]:
    """The parameters of a linked table's typed ``args`` columns (declared in ``schema.catalog``)."""
    return {"args_spec": fields.spec_json(declared), "args_columns": declared}


def _sweeps(con) -> bool:
    """Whether the slices of ``con`` hold ``SWEEP_MIN`` containers or more, for the sweep to
    try (a count of the base tables: a small fraction of the build)."""
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
    ((lanes, span),) = sqlmodules.fetch(con, "model/axis_lanes", kinds=CPU_NEST_KINDS)
    shift = 1 << (int(span) + BLEED_NS + 1).bit_length()
    # Lanes far apart make containment imply the same thread; with
    # astronomically many lanes x span the keys would overflow, and the
    # lane is then also compared (slower, but correct).
    spread = shift if (lanes + 1) * shift < (1 << 62) else 0
    # Sorted first, then numbered in that order (a streaming row_number): a
    # window ORDER BY would sort the wide rows again in one thread, 2-3x slower.
    # The table is stored in axis order, which the sweep reads.
    sqlmodules.run(con, "model/axis", kinds=CPU_NEST_KINDS, spread=spread)
    return spread == 0


# The sweep's slices are split into this many groups of about equal rows (between threads, or
# between top-level slices of one thread), each swept on a thread of its own (polars releases the
# GIL as it computes): on two cores the sweep takes about two thirds of its one-thread time.
# Statements run beside the sweep (the linked tables that do not read it, the rules) saved nothing
# measurable, so nothing runs beside it (bench/HISTORY.md).
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
    df = con.sql(sqlmodules.text("model/sweep_rows", kinds=_CONTAINER_KINDS)).pl()
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

    is_nested = depth > 0
    nested, nested_depth = idx.filter(is_nested), depth.filter(is_nested)  # the nested slices and their depths
    # Every (slice, ancestor) pair, one per level above the slice: by slice, outermost first.
    levels = pl.DataFrame({"c": nested, "d": nested_depth}).with_columns(lvl=pl.int_ranges(0, "d")).explode("lvl")
    ancestor = at_level(levels["lvl"], levels["c"])
    descendant = levels["c"]
    del levels
    parent_or_none = ancestor.gather(nested_depth.cum_sum() - 1)  # the last of each slice's rows: one level up
    parent = parent_or_none.clip(0)
    ok = (
        (parent_or_none >= 0)
        & (depth.gather(parent) == nested_depth - 1)
        & (lane.gather(parent) == lane.filter(is_nested))
        & (k1.gather(parent) >= k1.filter(is_nested))
        & (k1.gather(parent) > k0.filter(is_nested))
    )
    if (depth < 0).any() or not ok.all():
        return False
    del ok, is_nested
    put("_anc", pl.DataFrame({"id": ids.gather(descendant), "aid": ids.gather(ancestor)}).to_arrow())
    up = _stacks(pl, df, nested, nested_depth, parent, ancestor, descendant)
    del ancestor, descendant
    child_l, parent_l, child = _sweep_leaves(pl, df, leaves, depth, at_level, nested, parent)
    for part in _nest_rows(pl, df, depth, leaves, child_l, parent_l, child, up):
        put("_nest", part)
        del part
    return True


def _stacks(pl, containers, nested, nested_depth, parent, ancestor, descendant) -> dict:
    """Each container's stack as a slice below it inherits it (``_up``), from the nested containers
    ``nested`` (indexes of ``containers``) at depths ``nested_depth`` with parents ``parent`` and their
    ancestors ``ancestor`` (each slice's ``nested_depth`` rows, outermost first; ``descendant`` the slice of
    each row)."""
    # Each slice's rows are one run, from ``start`` to ``last``.
    start = nested_depth.cum_sum() - nested_depth
    last = start + nested_depth - 1
    row = pl.int_range(ancestor.len(), dtype=pl.Int64, eager=True)

    def inner_outer(kind: pl.Series) -> tuple[pl.Series, pl.Series]:
        """Per slice: the indexes of its innermost and outermost ancestors where ``kind`` (NULL: none)."""
        hit = pl.select(pl.when(kind.gather(ancestor)).then(row)).to_series()
        inner, outer = hit.forward_fill().gather(last), hit.backward_fill().gather(start)
        return at(inner, inner >= start), at(outer, outer <= last)

    def at(r: pl.Series, found: pl.Series) -> pl.Series:
        return pl.select(pl.when(found).then(ancestor.gather(r.fill_null(0)))).to_series()

    op, top_op = inner_outer(containers["op"])
    ann, _ = inner_outer(containers["ann"])
    return _up(pl, containers, nested, parent, ancestor.gather(start), op, top_op, ann, ancestor, descendant)


def _up(pl, containers, nested, parent, root, op, top_op, ann, ancestor, descendant) -> dict:
    """What a slice inherits from its parent container ``i`` (indexes of ``containers``), i.e. the
    ancestors-or-self of ``i``: its root (``i`` at top level), innermost and outermost ``cpu_op`` and
    innermost annotation (NULL: none), and its annotations, outermost first (``aos``, cut by
    ``aos_offsets``: one list per container and one more, empty, for a slice with no parent).
    ``nested`` are the nested containers, with parents ``parent``, roots ``root`` and ancestors of each kind
    ``op``, ``top_op``, ``ann`` (indexes); ``ancestor``/``descendant`` the (ancestor, slice) rows."""
    n = containers.height
    idx = pl.int_range(n, dtype=pl.Int64, eager=True)
    is_op, is_ann = containers["op"], containers["ann"]

    def spread(values: pl.Series, default: pl.Series | None = None) -> pl.Series:
        """``values`` of the nested containers as a column of every container (``default`` elsewhere)."""
        out = pl.repeat(None, n, dtype=pl.Int64, eager=True) if default is None else default.clone()
        return out.scatter(nested, values)

    mine = pl.select(pl.when(is_op).then(idx)).to_series()
    # The annotations of each container's ancestors-or-self: its ancestors' (outermost first), then itself.
    ann_row = is_ann.gather(ancestor)
    key = pl.concat([descendant.filter(ann_row) * 2, idx.filter(is_ann) * 2 + 1])
    order = key.arg_sort()
    aos = pl.concat([ancestor.filter(ann_row), idx.filter(is_ann)]).gather(order)
    owner = key.gather(order) // 2
    return {
        "parent": spread(parent),
        "root": spread(root, idx),
        "op": pl.select(pl.when(is_op).then(idx).otherwise(spread(op))).to_series(),
        "top_op": pl.select(pl.coalesce(spread(top_op), mine)).to_series(),
        "ann": pl.select(pl.when(is_ann).then(idx).otherwise(spread(ann))).to_series(),
        "aos": aos,
        "aos_offsets": owner.search_sorted(pl.int_range(n + 2, dtype=pl.Int64, eager=True), side="left").cast(pl.Int32),
    }


# ``_nest`` is made and stored in parts of this many rows: the whole table at once was held twice
# at the peak (its Arrow arrays and its copy in DuckDB).
NEST_ROWS = 1 << 18


def _nest_rows(pl, containers, depth, leaves, parented_calls, call_parents, child, up: dict) -> Iterator[pa.Table]:
    """``_nest``: every CPU slice's stack and children as ``cpu_slices`` stores them, in ``_cpu``'s order
    (parts of ``NEST_ROWS`` rows).

    ``containers``/``leaves`` are the containers and the calls, ``depth`` the containers' depths;
    ``parented_calls``/``call_parents`` each call with a parent and that parent (indexes), ``child`` the
    children per container (``p``, ``children``, ``child_ns``), ``up`` what ``_up`` gives.
    A slice inherits its parent's ancestors-or-self: the parent's root, innermost and
    outermost ``cpu_op``, innermost annotation and annotations; no parent: none of them,
    depth 0 and itself as root.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n, m = containers.height, leaves.height
    ids = containers["id"]
    leaf_parent = pl.repeat(None, m, dtype=pl.Int64, eager=True).scatter(parented_calls, call_parents)
    none = pl.zeros(m, dtype=pl.Int64, eager=True)
    children = pl.zeros(n, dtype=pl.Int64, eager=True).scatter(child["p"], child["children"])
    child_ns = pl.zeros(n, dtype=pl.Int64, eager=True).scatter(child["p"], child["child_ns"])
    children, child_ns = pl.concat([children, none]), pl.concat([child_ns, none])
    # Containers and calls together, in axis order.
    order = pl.concat([containers["pos"], leaves["pos"]]).arg_sort()
    own_all = pl.concat([ids, leaves["id"]]).gather(order)
    p_all = pl.concat([up["parent"], leaf_parent]).gather(order)
    del leaf_parent, none
    # Each slice's annotations: its parent's list (list n is the empty one) of container indexes,
    # then their ids and names (polars gathers the lists much faster than pyarrow's take).
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
                "annotations": pa.ListArray.from_arrays(offsets, containers["name"].gather(members).to_arrow()),
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


def _sweep_leaves(pl, containers, leaves, depth, at_level, nested, parent) -> tuple:
    """The calls' parents and every container's children, from the sweep's arrays: each call with a
    parent and that parent (indexes of ``leaves`` and ``containers``), and per parent ``p`` its
    ``children`` and the time they cover of it (``child_ns``).

    A call's parent is the innermost of the last container opened before it
    (on its thread) and that container's ancestors that encloses it
    (``BLEED_NS``), as ``model/nest_leaves.sql`` defines it. ``nested`` are the nested
    containers and ``parent`` their parents, as indexes of ``containers``.
    """
    k0, k1 = containers["k0"], containers["k1"]
    lk0, lk1 = leaves["k0"], leaves["k1"]
    j = containers["pos"].search_sorted(leaves["pos"], side="left").cast(pl.Int64) - 1
    jg = j.clip(0)
    l_idx = pl.int_range(leaves.height, dtype=pl.Int64, eager=True)
    same = (j >= 0) & (containers["lane"].gather(jg) == leaves["lane"])

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
    parented_calls, call_parents = (
        pl.concat([l_idx.filter(inside_last), up["l"]]),
        pl.concat([jg.filter(inside_last), up["a"]]),
    )
    # Children and the time they cover of their parent (same thread: the axis' differences are ns).
    pc = pl.concat([parent, call_parents])  # each child's parent
    ns = pl.select(
        pl.min_horizontal(pl.concat([k1.gather(nested), lk1.gather(parented_calls)]), k1.gather(pc))
        - pl.max_horizontal(pl.concat([k0.gather(nested), lk0.gather(parented_calls)]), k0.gather(pc))
    ).to_series()
    child = (
        pl.DataFrame({"p": pc, "ns": ns})
        .group_by("p")
        .agg(children=pl.len().cast(pl.Int64), child_ns=pl.col("ns").sum())
    )
    return parented_calls, call_parents, child


def _nest_leaves(con) -> None:
    """Runtime/driver calls: parent = innermost enclosing container, and ``_nest`` from the stacks
    (the range join's path: the sweep made ``_nest`` already)."""
    if _exists(con, "_nest"):
        return
    sqlmodules.run(con, "model/nest_leaves", launch_kinds=LAUNCH_KINDS, bleed=BLEED_NS)


def _right_side_hashed(con, run: Callable[[], None]) -> None:
    """``run`` the statements with each join hashing the side the SQL puts on its right (DuckDB's build side),
    whatever the planner estimates: for a statement whose estimates are known to be wrong (a
    filtered scan of events is estimated at a fifth of its rows or less)."""
    before = con.execute("SELECT current_setting('disabled_optimizers')").fetchall()[0][0]
    con.execute(f"SET disabled_optimizers = {literal(','.join(filter(None, (before, 'build_side_probe_side'))))}")
    try:
        run()
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # an aborted transaction: the error that stopped run() is reported
            con.execute(f"SET disabled_optimizers = {literal(before)}")
        raise
    con.execute(f"SET disabled_optimizers = {literal(before)}")
