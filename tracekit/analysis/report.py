"""Reports: the attention variants of one or more traces on one page, as data.

``build(sources)`` runs the named queries (``attention_calls``,
``stage_breakdown``, ``kernel_precision``, ``launch_api``, ``occupancy``,
``gpu_timeline``, ``step_summary``, ``call_timeline``, and for the breakdown
section ``gpu_breakdown``, ``op_summary``, ``module_summary``) and the findings
(``queries/findings/``) on every trace and returns a ``Report``: plain data
(``to_dict()``), rendered by ``tracekit.analysis.report_render`` to a terminal
(``print_report``) or one self-contained HTML page (``html``). With several
traces the first is the baseline: ``gpu_vs_first`` and a stage comparison
(``tracekit.diff.compare``) against it. Every number a renderer shows is a
value of ``Report.to_dict()``; ``METRICS`` says how each headline number is
computed from which query.
"""

from __future__ import annotations

import contextlib
import json
import shlex
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tracekit import api, diff
from tracekit.analysis import findings, report_render
from tracekit.ingest import sources
from tracekit.present.values import format_unit, records

# How many attention calls of a trace the timeline plot draws (one per step).
TIMELINE_CALLS = 8
# Ops and modules listed in the breakdown section, per trace.
TOP_ROWS = 5


@dataclass(frozen=True)
class Metric:
    """One headline number: its key in ``headline``, label, unit and how it is computed."""

    key: str
    label: str
    unit: str  # ns, count, num, pct, x, text
    how: str


METRICS = (
    Metric("device", "device", "text", "devices.name of the trace's first device"),
    Metric("impl", "implementation", "text", "most frequent impl of the trace's attention_calls"),
    Metric("attention_calls", "attention calls", "count", "rows of attention_calls (backward ones aside)"),
    Metric("gpu_ns_per_call", "GPU time / call (op-level)", "ns", "mean of attention_calls.gpu_ns"),
    Metric(
        "attention_kernel_ns_per_call", "GPU time / call (kernel)", "ns", "mean of attention_calls.attention_kernel_ns"
    ),
    Metric("gpu_vs_first", "op-level time vs first", "x", "gpu_ns_per_call / the first trace's"),
    Metric("cpu_ns_per_call", "CPU time / call", "ns", "mean of attention_calls.cpu_ns"),
    Metric("gpu_ops_per_call", "GPU ops / call", "num", "mean of attention_calls.gpu_ops"),
    Metric(
        "tflops_per_s",
        "achieved TFLOP/s",
        "num",
        "mean of attention_calls.tflops_per_s (kernel-level time; needs record_shapes)",
    ),
    Metric(
        "backward_calls",
        "backward calls",
        "count",
        "rows of attention_calls with direction backward (a fused SDPA backward; shown for training traces)",
    ),
    Metric(
        "backward_gpu_ns_per_call",
        "backward GPU time / call",
        "ns",
        "mean of attention_calls.gpu_ns over the backward calls",
    ),
    Metric(
        "tensor_core_pct",
        "tensor-core share",
        "pct",
        "kernel_precision.share_pct of class tensor_core (share of kernel time)",
    ),
    Metric("launch_api", "launch API (top)", "text", "the launch_api row with the most gpu_ns"),
    Metric(
        "reported_occupancy_pct",
        "occupancy reported",
        "pct",
        "occupancy.reported_occupancy_pct, mean weighted by total_ns",
    ),
    Metric(
        "theoretical_occupancy_pct",
        "occupancy theoretical",
        "pct",
        "occupancy.theoretical_occupancy_pct, mean weighted by total_ns",
    ),
    Metric("idle_pct", "GPU idle share", "pct", "100 * gpu_timeline.idle_ns / span_ns"),
    Metric(
        "source",
        "issued from (top)",
        "text",
        "call_sources.source of the most calls: the user line (file:line function) that issued them; "
        "'no Python stacks' for a trace recorded without with_stack",
    ),
)


@dataclass
class TraceReport:
    """Everything the report shows about one trace."""

    label: str  # unique within the report
    trace: str  # the trace's label in its source (the queries' trace column)
    source: str
    headline: dict
    stages: list[dict] = field(default_factory=list)  # stage_breakdown rows
    calls: list[dict] = field(default_factory=list)  # attention_calls rows
    timeline: list[dict] = field(default_factory=list)  # call_timeline rows of the drawn calls
    steps: list[dict] = field(default_factory=list)  # step_summary rows
    findings: list[findings.Finding] = field(default_factory=list)
    breakdown: list[dict] = field(default_factory=list)  # gpu_breakdown rows
    top_ops: list[dict] = field(default_factory=list)  # op_summary rows, heaviest TOP_ROWS
    top_modules: list[dict] = field(default_factory=list)  # module_summary rows, heaviest TOP_ROWS
    # Why a section is empty: {"topic": attention|shapes|modules, "text": one sentence}, from the recorded query.
    notes: list[dict] = field(default_factory=list)
    # With build(critical_path=True): critical_path_stages rows of the first ProfilerStep (each stage's share of
    # the step's critical path beside its share of GPU time: docs/critical_path.md).
    critical_path: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-friendly form."""
        return {
            "label": self.label,
            "trace": self.trace,
            "source": self.source,
            "headline": self.headline,
            "stages": self.stages,
            "calls": self.calls,
            "timeline": self.timeline,
            "steps": self.steps,
            "findings": [f.to_dict() for f in self.findings],
            "breakdown": self.breakdown,
            "top_ops": self.top_ops,
            "top_modules": self.top_modules,
            "notes": self.notes,
            "critical_path": self.critical_path,
        }


@dataclass
class Report:
    """A report over one or more traces; the first is the baseline of comparisons."""

    traces: list[TraceReport]
    comparison: dict | None = None
    version: str = ""
    every_finding: bool = False  # show findings that explain under findings.MIN_EXPLAINS_PCT too
    # Findings of the comparison (a trace against the first, no query behind them): (trace label, Finding).
    compared: list[tuple[str, findings.Finding]] = field(default_factory=list)

    @property
    def stages(self) -> list[str]:
        """Stages with GPU time in any trace, heaviest overall first ('other' last)."""
        total: Counter = Counter()
        for t in self.traces:
            for r in t.stages:
                if r["gpu_ops"]:
                    total[r["stage"]] += r["gpu_ns"]
        order = sorted(total, key=lambda s: (s == "other", -total[s], s))
        return order

    def all_findings(self) -> list[tuple[TraceReport, findings.Finding]]:
        """The findings to show, with their trace, ranked by the GPU time they explain (most first).

        Those explaining under findings.MIN_EXPLAINS_PCT of their trace's GPU
        span are left out unless the report was built with ``all_findings``.
        """
        pairs = [(t, f) for t in self.traces for f in t.findings if self.every_finding or f.shown]
        return sorted(pairs, key=lambda p: p[1].rank_key())

    def findings(self) -> list[findings.Group]:
        """The findings to show, one per finding over the traces it holds for (``findings.group``): by tier,
        then (several traces) by the first trace each holds for, then by the GPU time they explain."""
        pairs = [(t.label, f) for t, f in self.all_findings()] + self.compared
        return findings.group(pairs, [t.label for t in self.traces])

    metrics = METRICS
    timeline_calls = TIMELINE_CALLS

    def to_dict(self) -> dict:
        """Every number the report shows, JSON-friendly."""
        return {
            "tracekit_version": self.version,
            "metrics": [{"key": m.key, "label": m.label, "unit": m.unit, "how": m.how} for m in METRICS],
            "stages": self.stages,
            "traces": [t.to_dict() for t in self.traces],
            "comparison": self.comparison,
            "findings": [g.to_dict() for g in self.findings()],
        }

    def to_json(self) -> str:
        """``to_dict()`` as JSON text."""
        return json.dumps(self.to_dict(), indent=1, ensure_ascii=False) + "\n"

    def to_html(self) -> str:
        """One self-contained HTML page (inline CSS and SVG, no scripts)."""
        return report_render.html(self)

    def _repr_html_(self) -> str:
        """Jupyter: the HTML report in a frame (its styles stay inside)."""
        from html import escape

        return (
            f'<iframe srcdoc="{escape(self.to_html(), quote=True)}" '
            'style="width:100%;height:720px;border:1px solid #ddd"></iframe>'
        )

    def print(self, console=None, html_hint: bool = True, brief: bool = False) -> None:
        """Print to a rich console (default: stdout); ``brief``: the findings only."""
        report_render.print_report(self, console, html_hint=html_hint, brief=brief)


def headline(trace: str, rows: dict[str, list[dict]]) -> dict:
    """The headline numbers of one trace: its row of the ``headline`` query, and its stage shares."""
    row = next((r for r in rows["headline"] if r["trace"] == trace), {})
    keys = (
        "device", "impl", "attention_calls", "gpu_ns_per_call", "attention_kernel_ns_per_call", "cpu_ns_per_call",
        "gpu_ops_per_call", "tflops_per_s", "tensor_core_pct", "launch_api", "launch_apis",
        "reported_occupancy_pct", "theoretical_occupancy_pct", "idle_pct", "backward_calls",
        "backward_gpu_ns_per_call",
    )  # fmt: skip
    out = {k: row.get(k) for k in keys}
    out["attention_calls"] = out["attention_calls"] or 0
    out["backward_calls"] = out["backward_calls"] or 0
    out["launch_apis"] = out["launch_apis"] or []
    out["gpu_vs_first"] = None  # filled once every trace is known
    out["source"] = _top_source([r for r in rows.get("call_sources", []) if r["trace"] == trace])
    # The GPU span (gpu_timeline), the base of every finding's share.
    out["span_ns"] = next((r["span_ns"] for r in rows["gpu_timeline"] if r["trace"] == trace), None)
    out["stage_share_pct"] = {
        r["stage"]: r["share_pct"] for r in rows["stage_breakdown"] if r["trace"] == trace and r["gpu_ops"]
    }
    return out


def _top_source(calls: list[dict]) -> str | None:
    """The user line that issued most of these call_sources rows; a note without stacks; None without calls."""
    if not calls:
        return None
    if not any(r["stacks"] for r in calls):
        return "no Python stacks (record with with_stack=True)"
    counts = Counter(r["source"] or "library code only" for r in calls)
    top, n = max(counts.items(), key=lambda kv: (kv[1], kv[0] != "library code only"))
    return top if n == len(calls) else f"{top} ({n} of {len(calls)} calls)"


def _timeline_calls(rows: list[dict], limit: int = TIMELINE_CALLS) -> list[dict]:
    """call_timeline rows of the first call of each step (of the trace when stepless), at most ``limit`` calls."""
    chosen: list = []
    for r in rows:
        if r["call_in_step"] == 1 and r["call_id"] not in chosen:
            chosen.append(r["call_id"])
    keep = set(chosen[:limit])
    return [r for r in rows if r["call_id"] in keep]


# Queries the report runs more than once (itself, in its headline, through findings): computed once
# per trace (Trace.memoized), not once per use.
SHARED = ("gpu_breakdown", "gpu_timeline", "attention_calls", "kernel_precision", "launch_api", "occupancy")
QUERIES = (
    "headline",
    "attention_calls",
    "stage_breakdown",
    "kernel_precision",
    "launch_api",
    "occupancy",
    "gpu_timeline",
    "step_summary",
    "call_timeline",
    "gpu_breakdown",
    "op_summary",
    "module_summary",
    "call_sources",
    "recorded",
)


def build(sources, names=None, progress=None, all_findings: bool = False, critical_path: bool = False) -> Report:
    """Build a report over ``sources``: ``Trace`` objects or paths (each may hold several traces).

    ``names`` are the sources as the user gave them (for hints such as
    ``tracekit query findings.X SOURCE``); ``progress(done, total, what)`` is
    called as queries run. Every trace of every source is one column of the
    report, in order; the first is the baseline. ``all_findings`` shows the
    findings that explain under 1 % of the GPU span too (the data always has them).
    ``critical_path`` adds each trace's critical path of its first ProfilerStep
    (``critical_path_stages``: how much of the step's path each stage holds,
    beside its share of GPU time); off by default, it solves a graph per trace.
    """
    from tracekit import __version__

    sources = list(sources)
    names = list(names) if names is not None else [None] * len(sources)
    opened = []
    named_traces = []
    for source, name in zip(sources, names):
        if isinstance(source, api.Trace):
            named_traces.append((source, name or str(source.path or "SOURCE")))
        else:
            trace = api.load(source)
            opened.append(trace)
            named_traces.append((trace, name or str(source)))
    try:
        report = _build(named_traces, progress, __version__)
        report.every_finding = all_findings
        if critical_path:
            _critical_paths(report, named_traces)
        return report
    finally:
        for trace in opened:
            trace.close()


def _critical_paths(report: Report, named_traces) -> None:
    """Each trace's critical_path_stages rows (its first ProfilerStep), onto its TraceReport."""
    for trace, name in named_traces:
        rows = trace.query("critical_path_stages").to_dicts()
        for t in report.traces:
            if t.source == name:
                t.critical_path = [r for r in rows if r["trace"] == t.trace]


@dataclass
class _SourceAnswers:
    """What one source answered: every query's rows, its traces' labels and its findings."""

    trace: api.Trace
    name: str
    rows: dict[str, list[dict]]  # query name -> rows, every trace of the source
    labels: list[str]  # traces.trace, in trace_id order
    findings: list


def _build(named_traces, progress, version) -> Report:
    answers = _answer(named_traces, progress)
    reports, sides = _trace_reports(answers)
    if len(answers) == 1:
        _naive_first(reports, sides)
    _compare_to_first(reports)
    comparison = None
    if len(reports) > 1:
        # Each comparison sums stage_breakdown and call_counts of its two sides: run once per source, not
        # twice per trace compared (64 ranks of one dataset: 252 runs of queries over all 64 traces).
        with contextlib.ExitStack() as kept:
            for trace in {id(side.trace): side.trace for side in sides}.values():
                kept.enter_context(trace.memoized(diff.TOTALS_QUERIES))
            comparison = _stage_comparison(reports, sides)
    return Report(reports, comparison, version, compared=_fused_speedup(reports))


def _answer(named_traces, progress) -> list[_SourceAnswers]:
    """Run ``QUERIES`` and the findings on each source, calling ``progress`` after each."""
    steps_total = len(named_traces) * (len(QUERIES) + 1)
    done = 0

    def tick(what):
        nonlocal done
        done += 1
        if progress:
            progress(done, steps_total, what)

    answers = []
    for trace, name in named_traces:
        rows = {}
        with trace.memoized(SHARED):
            for query in QUERIES:
                rows[query] = records(trace.query_arrow(query))
                tick(query)
            labels = trace.arrow("SELECT trace FROM traces ORDER BY trace_id").column("trace").to_pylist()
            found = findings.run(trace)
        tick("findings")
        answers.append(_SourceAnswers(trace, name, rows, labels, found))
    return answers


def _trace_reports(answers: list[_SourceAnswers]) -> tuple[list[TraceReport], list[diff.Side]]:
    """One ``TraceReport`` per trace of every source, in order, and the ``diff.Side`` of each."""
    label_uses = Counter(label for answer in answers for label in answer.labels)
    # A label two sources share is told apart by the shortest distinguishing tail of the
    # sources' paths (A/graph_execution and B/graph_execution), as `load` does for files.
    source_labels = sources.trace_labels([Path(answer.name) for answer in answers])
    reports: list[TraceReport] = []
    sides = []
    shown_uses: Counter = Counter()
    for answer, source_label in zip(answers, source_labels):
        for label in answer.labels:
            if label_uses[label] == 1:
                shown = label
            elif len(answer.labels) == 1 and source_label != label:
                shown = source_label
            else:
                shown = f"{source_label}:{label}"
            shown_uses[shown] += 1
            if shown_uses[shown] > 1:  # the same source given twice
                shown = f"{shown}#{shown_uses[shown]}"
            reports.append(_trace_report(answer, label, shown))
            sides.append(diff.Side(answer.trace, [label], shown))
    return reports, sides


def _trace_report(answer: _SourceAnswers, trace: str, shown: str) -> TraceReport:
    """The report of the trace labelled ``trace`` in ``answer``, shown as ``shown``."""

    def of_trace(query: str) -> list[dict]:
        return [r for r in answer.rows[query] if r["trace"] == trace]

    return TraceReport(
        label=shown,
        trace=trace,
        source=answer.name,
        headline=headline(trace, answer.rows),
        stages=of_trace("stage_breakdown"),
        calls=of_trace("attention_calls"),
        timeline=_timeline_calls(of_trace("call_timeline")),
        steps=of_trace("step_summary"),
        findings=[f for f in answer.findings if f.trace == trace],
        breakdown=of_trace("gpu_breakdown"),
        top_ops=of_trace("op_summary")[:TOP_ROWS],
        top_modules=of_trace("module_summary")[:TOP_ROWS],
        notes=notes(next(iter(of_trace("recorded")), {}), headline(trace, answer.rows)["attention_calls"]),
    )


def notes(recorded: dict, attention_calls: int) -> list[dict]:
    """One sentence per empty part of a trace's report: what the trace lacks and what to record next time."""
    out = []
    if not attention_calls:
        lacks = []
        if not recorded.get("labels"):
            lacks.append("no record_function label")
        if not recorded.get("module_scopes"):
            lacks.append("no nn.Module scope")
        if not recorded.get("cpu_ops"):
            lacks.append("no CPU op")
        out.append(
            {
                "topic": "attention",
                "text": "No attention found: no label, op, module or kernel name matched an attention rule"
                + (f" (the trace has {', '.join(lacks)})" if lacks else "")
                + "; wrap attention in record_function('attention:NAME') or record with with_modules=True next time, "
                "or add a rule (--rules; docs/attribution.md).",
            }
        )
    elif not recorded.get("ops_with_shapes"):
        out.append(
            {
                "topic": "shapes",
                "text": "No shapes: recorded without record_shapes=True, so the attention calls have no shapes, FLOPs or "
                "TFLOP/s; record with record_shapes=True next time.",
            }
        )
    if recorded.get("gpu_ops") and not recorded.get("module_scopes"):
        out.append(
            {
                "topic": "modules",
                "text": "No module breakdown: the trace has no nn.Module scopes (module_summary is empty); record with "
                "with_stack=True and with_modules=True next time.",
            }
        )
    return out


def _naive_first(reports: list[TraceReport], sides: list[diff.Side]) -> None:
    """One SOURCE of several traces: the naive variant, when present, becomes the baseline."""
    naive = [i for i, t in enumerate(reports) if t.label == "naive"] or [
        i for i, t in enumerate(reports) if t.headline.get("impl") == "naive"
    ]
    if naive and naive[0] > 0:
        at = naive[0]
        reports.insert(0, reports.pop(at))
        sides.insert(0, sides.pop(at))


def _compare_to_first(reports: list[TraceReport]) -> None:
    """Fill each headline's ``gpu_vs_first``: its GPU time per call over the baseline's (several traces only)."""
    first = reports[0].headline["gpu_ns_per_call"] if reports else None
    for report in reports:
        own = report.headline["gpu_ns_per_call"]
        report.headline["gpu_vs_first"] = own / first if first and own is not None and len(reports) > 1 else None


# A trace's attention is fused when this share of its attention GPU time is the fused_attention stage.
FUSED_SHARE_PCT = 50.0


def _fused(t: TraceReport) -> bool:
    return (t.headline["stage_share_pct"].get("fused_attention") or 0) >= FUSED_SHARE_PCT


def _fused_speedup(reports: list[TraceReport]) -> list[tuple[str, findings.Finding]]:
    """A finding for each trace whose attention runs fused kernels and takes less GPU time per call than an
    unfused baseline (the first trace): the speed-up the post's fused variants show. It explains the baseline's
    time per call less its own, times its calls."""
    out: list[tuple[str, findings.Finding]] = []
    if len(reports) < 2 or _fused(reports[0]):
        return out
    first = reports[0]
    base = first.headline["gpu_ns_per_call"]
    for t in reports[1:]:
        own, calls = t.headline["gpu_ns_per_call"], t.headline["attention_calls"]
        if not (base and own and calls and own < base and _fused(t)):
            continue
        saved = int((base - own) * calls)
        hint = (
            f"tracekit diff {shlex.quote(first.source)} {shlex.quote(t.source)} --per-call"
            if first.source != t.source
            else f"the report's stage comparison, {t.label} vs {first.label} (tracekit report without --brief)"
        )
        out.append(
            (
                t.label,
                findings.Finding(
                    id="fused_speedup",
                    query="diff",
                    trace=t.trace,
                    severity="info",
                    title=f"Fused attention kernels are faster than {first.label}",
                    message=(
                        f"{format_unit(own, 'ns')} of GPU time per attention call "
                        f"against {first.label}'s {format_unit(base, 'ns')} ({format_unit(own / base, 'x')}): one fused "
                        "kernel instead of the separate matmul, scale, mask and softmax ops."
                    ),
                    columns=[],
                    explains_ns=saved,
                    explains_pct=None,  # time saved on another trace: no share of this one's span
                    tier="fix",
                    hint=hint,
                    short=f"{format_unit(own, 'ns')} ({format_unit(own / base, 'x')})",
                ),
            )
        )
    return out


def _stage_comparison(reports: list[TraceReport], sides: list[diff.Side]) -> dict:
    """Every trace after the first compared with it by stage (per call when every trace has calls)."""
    per_call = all(t.headline["attention_calls"] for t in reports)
    return {
        "against": reports[0].label,
        "by": "stage",
        "per_call": per_call,
        "tables": {
            t.label: records(diff.compare(sides[0], side, by="stage", per_call=per_call).arrow())
            for t, side in zip(reports[1:], sides[1:])
        },
    }
