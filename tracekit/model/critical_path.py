"""The longest path of a dependency graph, for the critical-path queries (docs/critical_path.md).

The graph itself is built in SQL (``queries/critical_path/critical_path_graph.sql``); what SQL cannot do
well is the longest path, a walk over the nodes in topological order. ``register`` gives a DuckDB
connection the function ``critical_path_solve(from_nodes, to_nodes, weights)``: three lists of one
graph's edges (node ids, weights in ns), answered with the 1-based positions of the longest path's
edges in path order (an empty list for an empty graph, NULL for a graph with a cycle). Like HTA's
``nx.dag_longest_path``, the path may start and end at any node; among paths of equal length the
first found wins (edges are visited in the order given, so the answer is deterministic).
"""

from __future__ import annotations

from collections import deque

import duckdb

FUNCTION = "critical_path_solve"


def longest_path(src: list[int], dst: list[int], weight: list[int]) -> list[int] | None:
    """0-based positions of the edges on a longest path, in order; None when the graph has a cycle."""
    if not src:
        return []
    out_edges: dict[int, list[int]] = {}
    indegree: dict[int, int] = {}
    for i, (u, v) in enumerate(zip(src, dst, strict=True)):
        out_edges.setdefault(u, []).append(i)
        indegree.setdefault(u, 0)
        indegree[v] = indegree.get(v, 0) + 1
    dist = dict.fromkeys(indegree, 0)
    best_in: dict[int, int] = {}  # node -> edge that reaches it by the longest path
    ready = deque(n for n, d in indegree.items() if d == 0)
    seen = 0
    while ready:
        u = ready.popleft()
        seen += 1
        du = dist[u]
        for i in out_edges.get(u, ()):
            v = dst[i]
            w = weight[i] or 0
            if v not in best_in or du + w > dist[v]:
                dist[v] = du + w
                best_in[v] = i
            indegree[v] -= 1
            if indegree[v] == 0:
                ready.append(v)
    if seen != len(indegree):
        return None
    end = max(dist, key=lambda n: dist[n])  # the first node of the longest distance
    path = []
    while end in best_in:
        i = best_in[end]
        path.append(i)
        end = src[i]
    path.reverse()
    return path


def _solve(from_nodes, to_nodes, weights):
    import pyarrow as pa

    src_rows, dst_rows, w_rows = (col.to_pylist() for col in (from_nodes, to_nodes, weights))
    out: list[list[int] | None] = []
    for src, dst, w in zip(src_rows, dst_rows, w_rows, strict=True):
        if src is None or dst is None or w is None:
            out.append(None)
            continue
        path = longest_path(src, dst, w)
        out.append(None if path is None else [i + 1 for i in path])
    return pa.array(out, type=pa.list_(pa.int64()))


def register(con: duckdb.DuckDBPyConnection) -> None:
    """Give ``con`` the function ``critical_path_solve`` (once per connection)."""
    try:
        # (duckdb's stubs want the UDF type as an enum it does not export: "arrow" is its string form)
        con.create_function(  # type: ignore[call-overload]
            FUNCTION, _solve, ["BIGINT[]", "BIGINT[]", "BIGINT[]"], "BIGINT[]", type="arrow", side_effects=False
        )
    except duckdb.Error as exc:
        # Already there: this connection was given twice ("already created"), or another connection of
        # this process to the same database file registered it in their shared catalog ("already exists").
        if "already" not in str(exc):
            raise
