"""Findings: "what stands out" in a trace, as data.

A finding is a query in the shipped ``queries/findings/`` folder that returns
the rows behind it (no rows: the finding does not fire), plus a row of
``queries/findings/findings.csv`` giving its severity and a message template.
The title is the query's header title, so the query documents itself. A
trace gets one finding per query that returns rows for it; the message is
filled in from those rows (``{rows}``, ``{sum_<column>}`` and the first,
heaviest row's columns; format specs ``us``, ``ms``, ``pct``, ``x`` and
``short`` render durations in ns, percentages, ratios and long kernel names;
``{by_<text column>__<number column>}`` sums a number per value of a text column).

A finding that explains GPU time names, in findings.csv's ``explains``
column, the column of its rows (ns) whose sum is that time; its share of the
trace's GPU span (gpu_timeline) ranks the findings, and the report leaves out
those that explain less than ``MIN_EXPLAINS_PCT`` unless asked for all.
Findings that explain no time (a reporting gap, left-out orphans) rank after.

Every percentage a finding's line quotes has one base, the GPU span (the
message quotes times; launch_bound and gpu_idle quote the share of their own
device's span, the same base on a one-GPU trace). findings.csv's ``tier``
says what a finding asks of the reader: ``fix`` (a change in the code or the
rules removes the time: a hidden copy, FP32 math, missed attention), ``time``
(where the time goes: launch-bound, idle, CPU-bound calls, one dominant
kernel) or ``gap`` (a reporting gap: nothing to fix in the model). Findings
are ranked by tier, then by the GPU time they explain. A finding is told once:
``SUBSUMED`` drops the rows of one finding that another covers on the same
device (idle time that launch_bound already explains as host wait).
``group`` gathers one finding over several traces into one ``Group``.
"""

from __future__ import annotations

import csv
import math
import string
from dataclasses import dataclass, field

from tracekit.errors import QueryError
from tracekit.library import queries
from tracekit.present.values import UNITS, format_unit, records

SEVERITIES = ("warning", "info")
TIERS = ("fix", "time", "gap")
# finding -> (the finding that covers it, the columns that say where): gpu_idle's rows for a device where
# launch_bound fired are the same idle time, told once by launch_bound (whose line gives the idle share too).
SUBSUMED = {"gpu_idle": ("launch_bound", ("trace", "device"))}
# Evidence rows kept per finding and trace (the query lists them all).
MAX_ROWS = 25
# A finding explaining less of the GPU span than this is not shown (report --all-findings shows it).
MIN_EXPLAINS_PCT = 1.0


@dataclass(frozen=True)
class Rule:
    """One finding: its query and how to word it."""

    query: queries.Query
    severity: str
    message: str
    explains: str = ""  # the rows' column (ns) whose sum is the GPU time the finding explains
    tier: str = "time"  # fix, time or gap (TIERS)

    @property
    def id(self) -> str:
        """The finding's id: the query's bare name."""
        return self.query.name

    @property
    def title(self) -> str:
        """The query's header title, without its full stop."""
        return self.query.title.rstrip(".")


@dataclass
class Finding:
    """A finding that fired for one trace, with the rows behind it."""

    id: str
    query: str
    trace: str
    severity: str
    title: str
    message: str
    columns: list[str]
    rows: list[dict] = field(default_factory=list)
    rows_total: int = 0
    explains_ns: int | None = None  # GPU time the finding explains (None: it explains no time)
    explains_pct: float | None = None  # explains_ns as a share of the trace's GPU span
    tier: str = "time"  # fix, time or gap (TIERS)
    hint: str = ""  # the command that shows the rows, when not `tracekit query QUERY SOURCE`
    short: str = ""  # its figure beside the trace's label when listed with others ("79.5 µs (0.07x)")

    @property
    def shown(self) -> bool:
        """Whether the report lists it by default: it explains no time, or at least MIN_EXPLAINS_PCT."""
        return self.explains_pct is None or self.explains_pct >= MIN_EXPLAINS_PCT

    def rank_key(self) -> tuple:
        """Sort key: by tier (fix, time, gap), then most time explained first, findings that explain no time
        last; warnings before info."""
        return (
            TIERS.index(self.tier),
            self.explains_ns is None,
            -(self.explains_ns or 0),
            SEVERITIES.index(self.severity),
        )

    def to_dict(self) -> dict:
        """JSON-friendly form."""
        return {
            "id": self.id,
            "query": self.query,
            "trace": self.trace,
            "severity": self.severity,
            "tier": self.tier,
            "title": self.title,
            "message": self.message,
            "columns": self.columns,
            "rows_total": self.rows_total,
            "explains_ns": self.explains_ns,
            "explains_pct": self.explains_pct,
            "rows": self.rows,
        }


def rules() -> list[Rule]:
    """The shipped findings, in findings.csv order; every findings query must have a row and vice versa."""
    folder = queries.shipped_dir() / "findings"
    unmatched = {named.name: named for named in queries.library().values() if named.id.startswith("findings.")}
    path = folder / "findings.csv"
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            name = row["query"].strip()
            if name not in unmatched:
                raise QueryError(f"{path}:{line}: no query findings/{name}.sql")
            if row["severity"] not in SEVERITIES:
                raise QueryError(f"{path}:{line}: severity must be one of {', '.join(SEVERITIES)}")
            if row["tier"] not in TIERS:
                raise QueryError(f"{path}:{line}: tier must be one of {', '.join(TIERS)}")
            named = unmatched.pop(name)
            explains = (row.get("explains") or "").strip()
            if explains and explains not in {column.name for column in named.columns}:
                raise QueryError(f"{path}:{line}: explains {explains!r} is not a column of findings/{name}.sql")
            out.append(Rule(named, row["severity"], row["message"], explains, row["tier"]))
    if unmatched:
        raise QueryError(f"{path}: no row for findings/{min(unmatched)}.sql")
    return out


class _Formatter(string.Formatter):
    """str.format with the report's unit specs ({x:us}, {x:pct}, {name:short}, ...) and
    ``{by_<text column>__<number column>}``: each value of the text column with the sum of
    the number column over its rows, largest first ("cudaLaunchKernelExC: 168, cuLaunchKernel: 1")."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def get_value(self, key, args, kwargs):
        if isinstance(key, str) and key.startswith("by_") and "__" in key and key not in kwargs:
            text, number = key[3:].split("__", 1)
            if self.rows and (text not in self.rows[0] or number not in self.rows[0]):
                raise KeyError(key)
            sums: dict = {}
            for r in self.rows:
                sums[r[text]] = sums.get(r[text], 0) + (r[number] or 0)
            return ", ".join(
                f"{value}: {format_unit(total, 'count')}"
                for value, total in sorted(sums.items(), key=lambda kv: -kv[1])
            )
        return super().get_value(key, args, kwargs)

    def format_field(self, value, spec):
        if value is None:
            return "?"
        return format_unit(value, spec) if spec in UNITS else super().format_field(value, spec)


def message(template: str, rows: list[dict]) -> str:
    """Fill a message template from a trace's evidence rows (heaviest first)."""
    context = dict(rows[0]) if rows else {}
    context["rows"] = len(rows)
    for key in context.copy():
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        if values:
            total = sum(values)
            context[f"sum_{key}"] = total if not isinstance(total, float) or math.isfinite(total) else None
    try:
        return _Formatter(rows).format(template, **context)
    except (KeyError, IndexError, ValueError) as exc:
        raise QueryError(f"findings.csv: message {template!r} cannot be filled: {exc}") from None


def run(trace, labels: list[str] | None = None, max_rows: int = MAX_ROWS) -> list[Finding]:
    """Run every finding against a loaded ``Trace``; one Finding per rule and trace it fires for.

    ``labels`` restricts the result to those trace labels (all when None).
    """
    spans = {r["trace"]: r["span_ns"] for r in records(trace.query_arrow("gpu_timeline"))}
    out = []
    answers = {rule.id: (rule, trace.query_arrow(rule.query.id)) for rule in rules()}
    covered = {
        name: {tuple(r[c] for c in where) for r in records(answers[by][1])} for name, (by, where) in SUBSUMED.items()
    }
    for rule, table in answers.values():
        rows = records(table)
        if rule.id in SUBSUMED:
            where = SUBSUMED[rule.id][1]
            rows = [r for r in rows if tuple(r[c] for c in where) not in covered[rule.id]]
        by_trace: dict[str, list[dict]] = {}
        for r in rows:
            by_trace.setdefault(r["trace"], []).append(r)
        for label, trace_rows in by_trace.items():
            if labels is not None and label not in labels:
                continue
            explains_ns = explains_pct = None
            if rule.explains:
                explains_ns = int(sum(r[rule.explains] or 0 for r in trace_rows))
                span = spans.get(label)
                explains_pct = 100.0 * explains_ns / span if span else None
            out.append(
                Finding(
                    id=rule.id,
                    query=rule.query.id,
                    trace=label,
                    severity=rule.severity,
                    title=rule.title,
                    message=message(rule.message, trace_rows),
                    columns=table.column_names,
                    rows=trace_rows[:max_rows],
                    rows_total=len(trace_rows),
                    explains_ns=explains_ns,
                    explains_pct=explains_pct,
                    tier=rule.tier,
                )
            )
    return sorted(out, key=Finding.rank_key)


@dataclass
class Group:
    """One finding over the traces it holds for: ``members`` are (trace label, Finding), heaviest first."""

    id: str
    severity: str
    tier: str
    title: str
    members: list[tuple[str, Finding]]
    first: int = 0  # position, in the report's order, of the first trace it holds for

    @property
    def traces(self) -> list[str]:
        """The labels of the traces it holds for, heaviest first."""
        return [label for label, _ in self.members]

    @property
    def explains_ns(self) -> int | None:
        """GPU time it explains over all its traces (None: it explains no time)."""
        times = [f.explains_ns for _, f in self.members if f.explains_ns is not None]
        return sum(times) if times else None

    def to_dict(self) -> dict:
        """JSON-friendly form: the finding, the traces it holds for and each trace's line."""
        return {
            "id": self.id,
            "severity": self.severity,
            "tier": self.tier,
            "title": self.title,
            "traces": self.traces,
            "explains_ns": self.explains_ns,
            "members": [
                {"trace": label, "message": f.message, "explains_ns": f.explains_ns, "explains_pct": f.explains_pct}
                for label, f in self.members
            ],
        }


def group(pairs: list[tuple[str, Finding]], order: list[str] | None = None) -> list[Group]:
    """One ``Group`` per finding id over ``pairs`` of (trace label, Finding), ranked.

    Ranked by tier (fix, time, gap); within a tier, when ``order`` (the
    report's trace labels, baseline first) is given and has several traces,
    by the first trace each holds for, so a comparison reads in the order its
    traces were given (the baseline's findings are what the others fix); then
    by the GPU time explained, findings explaining none last.
    """
    by_id: dict[str, list[tuple[str, Finding]]] = {}
    for label, f in pairs:
        by_id.setdefault(f.id, []).append((label, f))
    position = {label: i for i, label in enumerate(order or [])}
    out = []
    for members in by_id.values():
        members.sort(key=lambda m: (m[1].explains_ns is None, -(m[1].explains_ns or 0), position.get(m[0], 0)))
        f = members[0][1]
        first = min(position.get(label, 0) for label, _ in members) if len(position) > 1 else 0
        out.append(Group(f.id, f.severity, f.tier, f.title, members, first))

    def key(g: Group) -> tuple:
        return (TIERS.index(g.tier), g.first, g.explains_ns is None, -(g.explains_ns or 0),
                SEVERITIES.index(g.severity), g.id)  # fmt: skip

    return sorted(out, key=key)
