"""Comparing two traces (or two sets of traces): per stage or per kernel name.

Each side is summed from named queries, so every number can be checked with
``tracekit query``: ``stage_breakdown`` (GPU ops and time per attention stage)
or ``top_kernels -p limit=0`` (per GPU op name), and ``call_counts`` for the
number of calls when ``per_call`` divides by it (forward calls: a training step's backward belongs to its
forward call, as in the report's headline). Matching by stage works
across devices and vendors (an H100's flash kernel and an MI300's both land in
``fused_attention``); matching by kernel name lists the names found on one
side only as ``added`` / ``removed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracekit.errors import TracekitError
from tracekit.result import Result

if TYPE_CHECKING:
    from tracekit.api import Trace

BY = ("stage", "kernel")


@dataclass
class Side:
    """One side of a comparison: a loaded ``Trace`` and which of its traces count (None: all)."""

    trace: Trace
    labels: list[str] | None = None
    name: str = ""

    def _keep(self, label: str) -> bool:
        return self.labels is None or label in self.labels


def _side(trace_or_side) -> Side:
    return trace_or_side if isinstance(trace_or_side, Side) else Side(trace_or_side)


# The queries ``totals`` runs: a caller comparing many sides of one Trace keeps their results (Trace.memoized).
TOTALS_QUERIES = ("stage_breakdown", "top_kernels", "call_counts")


def totals(side: Side, by: str, include_orphans: bool = False) -> tuple[dict[str, list], int]:
    """``({key: [gpu_ops, ns]}, attention calls)`` of one side, summed over its traces."""
    if by not in BY:
        raise TracekitError(f"cannot compare by {by!r} (choose {' or '.join(BY)})")
    params = {"include_orphans": include_orphans}
    out: dict[str, list] = {}
    if by == "stage":
        rows = side.trace.query_arrow("stage_breakdown", params).to_pylist()
        key, count, ns = "stage", "gpu_ops", "gpu_ns"
    else:
        rows = side.trace.query_arrow("top_kernels", {**params, "limit": 0}).to_pylist()
        key, count, ns = "name", "count", "total_ns"
    for r in rows:
        if side._keep(r["trace"]) and r[count]:
            summed = out.setdefault(r[key], [0, 0])
            summed[0] += r[count]
            summed[1] += r[ns]
    calls = sum(r["calls"] for r in side.trace.query_arrow("call_counts", params).to_pylist() if side._keep(r["trace"]))
    return out, calls


def compare(a, b, by: str = "stage", per_call: bool = False, include_orphans: bool = False) -> Result:
    """Compare side ``a`` (the baseline) with side ``b``: one row per stage or kernel name.

    ``a`` and ``b`` are ``Trace`` objects or ``Side`` (a Trace and the trace
    labels to count). Columns: the key (``stage`` or ``name``), ``change``
    (added, removed, slower, faster, same), GPU ops and GPU time of each side,
    ``delta_ns`` (b - a), ``delta_pct`` (relative to a) and ``ratio`` (b / a);
    with ``per_call`` the counts and times are per attention call of each side
    (columns ``*_per_call``). Rows are sorted by impact: ``|delta_ns|``, largest
    first, then by key. Returns a ``Result`` (``.arrow()``, ``.pl()``, ``.df()``).
    """
    a, b = _side(a), _side(b)
    totals_a, calls_a = totals(a, by, include_orphans)
    totals_b, calls_b = totals(b, by, include_orphans)
    if per_call:
        for side, calls in ((a, calls_a), (b, calls_b)):
            if not calls:
                raise TracekitError(
                    f"{side.name or 'a side'} has no attention calls: compare totals instead (without --per-call)"
                )
    key = "stage" if by == "stage" else "name"
    suffix = "_per_call" if per_call else ""
    rows = []
    for group in sorted(set(totals_a) | set(totals_b)):
        (ops_a, ns_a), (ops_b, ns_b) = totals_a.get(group, (0, 0)), totals_b.get(group, (0, 0))
        if per_call:
            ops_a, ns_a, ops_b, ns_b = ops_a / calls_a, ns_a / calls_a, ops_b / calls_b, ns_b / calls_b
        delta = ns_b - ns_a
        if not ops_a:
            change = "added"
        elif not ops_b:
            change = "removed"
        else:
            change = "slower" if delta > 0 else "faster" if delta < 0 else "same"
        rows.append(
            {
                key: group,
                "change": change,
                f"a_gpu_ops{suffix}": ops_a,
                f"b_gpu_ops{suffix}": ops_b,
                f"a_ns{suffix}": ns_a,
                f"b_ns{suffix}": ns_b,
                f"delta_ns{suffix}": delta,
                "delta_pct": round(100.0 * delta / ns_a, 3) if ns_a else None,
                "ratio": round(ns_b / ns_a, 4) if ns_a else None,
            }
        )
    rows.sort(key=lambda r: (-abs(float(r[f"delta_ns{suffix}"] or 0)), str(r[key])))
    import pyarrow as pa

    number = pa.float64() if per_call else pa.int64()
    schema = pa.schema(
        [
            (key, pa.string()),
            ("change", pa.string()),
            (f"a_gpu_ops{suffix}", number),
            (f"b_gpu_ops{suffix}", number),
            (f"a_ns{suffix}", number),
            (f"b_ns{suffix}", number),
            (f"delta_ns{suffix}", number),
            ("delta_pct", pa.float64()),
            ("ratio", pa.float64()),
        ]
    )
    return Result(pa.Table.from_pylist(rows, schema=schema), f"diff by {by}")
