"""The stage breakdown as ``tracekit stages`` shows it: each trace's stages, then one total row of attention.

The total row (stage ``total``) sums the trace's attention stages (every stage but ``other``):
their GPU ops, GPU time, share of the trace's GPU op time and CPU time, with ``attention_share_pct`` 100,
so each stage's ``attention_share_pct`` reads as its part of that row.
"""

from __future__ import annotations

import pyarrow as pa

TOTAL = "total"
# Columns summed into the total row; the shares are sums too (of one trace's rows, each of one base).
SUMMED = ("gpu_ops", "gpu_ns", "share_pct", "cpu_ops", "cpu_ns", "backward_gpu_ns")


def with_total(breakdown: pa.Table) -> pa.Table:
    """``stage_breakdown`` rows with a total row of attention after each trace's rows."""
    rows = breakdown.to_pylist()
    out: list[dict] = []
    for i, row in enumerate(rows):
        out.append(row)
        last = i + 1 == len(rows) or rows[i + 1]["trace"] != row["trace"]
        if last:
            mine = [r for r in rows if r["trace"] == row["trace"] and r["stage"] != "other"]
            total: dict[str, object] = {name: None for name in breakdown.column_names}
            total.update(trace=row["trace"], rank=row.get("rank"), stage=TOTAL)
            for name in SUMMED:
                if name in total:
                    values = [r[name] for r in mine if r[name] is not None]
                    total[name] = (
                        round(sum(values), 3) if isinstance(values[0] if values else 0, float) else sum(values)
                    )
            for name in breakdown.column_names:
                if name.startswith(("gpu_by_", "cpu_by_")):
                    total[name] = sum(r[name] or 0 for r in mine)
            if "attention_share_pct" in total:
                total["attention_share_pct"] = 100.0 if any(r["gpu_ns"] for r in mine) else None
            out.append(total)
    return pa.Table.from_pylist(out, schema=breakdown.schema)


def call_counts(calls: pa.Table) -> str:
    """How the calls split, as ``report`` counts them: ``": 6 forward (report's attention calls), 6 backward"``;
    ``""`` when every call counts as a call (no backward one)."""
    directions = calls.column("direction").to_pylist() if "direction" in calls.column_names else []
    backward = sum(1 for d in directions if d == "backward")
    if not backward:
        return ""
    return f": {len(directions) - backward} forward (report's attention calls), {backward} backward"


def no_attention_notes(trace, calls: pa.Table) -> list[str]:
    """For each trace of ``trace`` with no attention call: ``"LABEL: No attention found: ..."`` (report.notes)."""
    from tracekit.analysis import report
    from tracekit.present.values import records

    with_calls = set(calls.column("trace").to_pylist()) if calls.num_rows else set()
    return [
        f"{row['trace']}: {note['text']}"
        for row in records(trace.query_arrow("recorded"))
        if row["trace"] not in with_calls
        for note in report.notes(row, 0)
        if note["topic"] == "attention"
    ]
