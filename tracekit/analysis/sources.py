"""Source lines: the user-code line that issued each attention call (the call_sources query), beside the calls."""

from __future__ import annotations

import pyarrow as pa

NO_STACKS = "no Python stacks in this trace: record it with with_stack=True for the user line that issued each call"


def with_sources(trace, calls: pa.Table) -> tuple[pa.Table, bool]:
    """``calls`` (attention_calls rows) with a ``source`` column ("file:line function", call_sources), and
    whether any of their traces recorded Python stacks."""
    rows = trace.query_arrow("call_sources").select(["trace", "call_id", "source", "stacks"]).to_pylist()
    source = {(r["trace"], r["call_id"]): r["source"] for r in rows}
    stacks = any(r["stacks"] for r in rows)
    keys = zip(calls.column("trace").to_pylist(), calls.column("call_id").to_pylist(), strict=True)
    column = pa.array([source.get(key) for key in keys], pa.string())
    return calls.append_column("source", column), stacks


def summary(calls: pa.Table) -> list[str]:
    """One line per source of ``calls`` (with_sources' rows), most calls first: ``N calls  file:line function``."""
    counts: dict[str | None, int] = {}
    for source in calls.column("source").to_pylist():
        counts[source] = counts.get(source, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] is None, kv[0] or ""))
    return [
        f"{n:>6} call{'s' if n != 1 else ' '}  {s or '(no user frame: only library code around it)'}" for s, n in ranked
    ]
