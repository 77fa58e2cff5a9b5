"""Rendering a ``tracekit.analysis.report.Report``: a rich terminal summary and one self-contained HTML page.

The HTML page has inline CSS and inline SVG plots (``tracekit.plots``), no
scripts and no external resources, so it opens offline. Every headline cell
carries its exact value (``data-trace``, ``data-key``, ``data-value``), and
every finding links to the table of rows behind it.
"""

from __future__ import annotations

import re
import shlex
from html import escape
from typing import TYPE_CHECKING

from tracekit.analysis import findings, report_breakdown
from tracekit.present import humanize, plots
from tracekit.present.values import cell, format_ns_as
from tracekit.present.values import format_unit as fmt

if TYPE_CHECKING:  # the report's data; rendering never builds one
    from tracekit.analysis.report import Report, TraceReport

SEVERITY_STYLE = {"warning": "bold yellow", "info": "cyan"}


def _rows(report: Report) -> list[tuple[str, str, str, str]]:
    """(key, label, unit, how) of every headline row: the metrics, then one row per stage share."""
    training = any(t.headline.get("backward_calls") for t in report.traces)
    out = [
        (m.key, m.label, m.unit, m.how)
        for m in report.metrics
        if (len(report.traces) > 1 or m.key != "gpu_vs_first")
        and (training or m.key not in ("backward_calls", "backward_gpu_ns_per_call"))
    ]
    out += [
        (f"stage_share_pct.{s}", f"stage {s}", "pct", f"stage_breakdown.share_pct of stage {s} (share of GPU time)")
        for s in report.stages
    ]
    return out


def value(t: TraceReport, key: str):
    """A headline value by key (``stage_share_pct.<stage>`` reaches into the shares)."""
    if key.startswith("stage_share_pct."):
        return t.headline["stage_share_pct"].get(key.split(".", 1)[1])
    return t.headline.get(key)


def _hint(t: TraceReport, query: str) -> str:
    return f"tracekit query {query} {shlex.quote(t.source)}"


# ---- terminal ---------------------------------------------------------------


def print_report(report: Report, console=None, html_hint: bool = True, brief: bool = False) -> None:
    """Print the report as rich tables, fitting the console's width (``brief``: the findings only)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    n = len(report.traces)
    console.print(
        Text(
            f"tracekit report: {n} trace{'s' if n != 1 else ''}"
            + (f", compared with the first ({report.traces[0].label})" if n > 1 else ""),
            style="bold",
        )
    )
    if brief:
        print_findings(report, console)
        print_notes(report, console, topics=("attention", "shapes"))
        return
    rows = _rows(report)
    label_w = max(len(r[1]) for r in rows)
    per_table = max(1, (console.width - label_w - 2) // 18)
    for start in range(0, n, per_table):
        chunk = report.traces[start : start + per_table]
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
        table.add_column("", no_wrap=True, style="bold")
        for t in chunk:
            table.add_column(t.label, justify="right", overflow="fold", min_width=16)
        for key, label, unit, _ in rows:
            cells = [fmt(value(t, key), unit) for t in chunk]
            if key == "device":  # the vendor is in the GPU's name; the column is narrow
                cells = [re.sub(r"^(NVIDIA|AMD) ", "", c) for c in cells]
            table.add_row(label, *cells)
        console.print(table)
    report_breakdown.terminal(report, console)
    print_findings(report, console)
    print_critical_path(report, console)
    print_notes(report, console)
    if report.comparison:
        _print_comparison(report, console, Table, box, Text)
    if html_hint:
        console.print(Text("Plots: tracekit report ... --html report.html", style="dim"))


def print_findings(report: Report, console) -> None:
    """What stands out: one entry per finding with the traces it holds for (``Report.findings``)."""
    from rich.text import Text

    by_label = {t.label: t for t in report.traces}
    groups = report.findings()
    console.print(Text("What stands out", style="bold"))
    if not groups:
        console.print("  nothing")
    width = max(40, console.width)
    for i, g in enumerate(groups, 1):
        label, f = g.members[0]
        size = ""
        if len(g.members) > 1 and g.explains_ns is not None and not f.short:
            size = f" ({fmt(g.explains_ns, 'ns')} in all)"
        elif _explains(f) and not f.short:
            size = f" ({_explains(f)})"
        head = f"[{g.severity}] {g.title}: {', '.join(g.traces)}"
        # Wrapped at words with a hanging indent; on its first line the severity in its colour, the title bold.
        for k, part in enumerate(humanize.prose(head + size, width, f"{i:2}. ", "    ")):
            line = Text(part)
            if k == 0:
                line.stylize(SEVERITY_STYLE.get(g.severity, ""), 4, 6 + len(g.severity))
                line.stylize("bold", 7 + len(g.severity), min(len(part), 4 + len(head)))
            console.print(line, soft_wrap=True)
        text = f"{label}: {f.message}" if len(g.members) > 1 else f.message
        for part in humanize.prose(text, width, "    ", "    "):
            console.print(Text(part), soft_wrap=True)
        if len(g.members) > 1:
            also = ", ".join(f"{other} {_short(o)}".strip() for other, o in g.members[1:])
            for part in humanize.prose("also " + also, width, "    ", "    "):
                console.print(Text(part, style="dim"), soft_wrap=True)
        # One line, never wrapped: it is copied and pasted (a terminal folds it only on screen).
        console.print(Text(f"    rows: {f.hint or _hint(by_label[label], f.query)}", style="dim"), soft_wrap=True)


def print_critical_path(report: Report, console) -> None:
    """With build(critical_path=True): per trace, each stage's share of its first step's critical path beside
    its share of GPU time (critical_path_stages), heaviest on the path first."""
    from rich.text import Text

    traced = [t for t in report.traces if t.critical_path]
    if not traced:
        return
    console.print(Text("On the critical path (first ProfilerStep; critical_path_stages)", style="bold"))
    width = max(40, console.width)
    for t in traced:
        parts = [
            f"{r['stage']} {fmt(r['path_pct'], 'pct')} of the path ({fmt(r['gpu_pct'], 'pct')} of GPU time)"
            for r in sorted(t.critical_path, key=lambda r: -(r["path_ns"] or 0))
        ]
        for part in humanize.prose(f"{t.label}: " + ", ".join(parts), width, "  ", "    "):
            console.print(Text(part), soft_wrap=True)


def _short(f) -> str:
    """A finding's figure beside its trace's label in an "also" list: its own, else the time it explains."""
    if f.short:
        return f.short
    size = fmt(f.explains_ns, "ns") if f.explains_ns is not None else ""
    return size + (f" ({f.explains_pct:.1f} %)" if f.explains_pct is not None else "")


def print_notes(report: Report, console, topics=("attention", "shapes", "modules")) -> None:
    """Why parts of the report are empty: each note once, with the traces it holds for."""
    from rich.text import Text

    by_text: dict[str, list[str]] = {}
    for t in report.traces:
        for note in t.notes:
            if note["topic"] in topics:
                by_text.setdefault(note["text"], []).append(t.label)
    if not by_text:
        return
    console.print(Text("Notes", style="bold"))
    for text, labels in by_text.items():
        for part in humanize.prose(f"{', '.join(labels)}: {text}", max(40, console.width), "  - ", "    "):
            console.print(Text(part), soft_wrap=True)


def _time_scale(rows: list[dict], suffix: str) -> float:
    """The duration that picks a comparison table's one time unit (``humanize.time_scale``)."""
    return humanize.time_scale([r[f"{side}_ns{suffix}"] for r in rows for side in ("a", "b", "delta")])


def _print_comparison(report, console, Table, box, Text) -> None:
    comparison = report.comparison
    basis = "per attention call" if comparison["per_call"] else "totals"
    suffix = "_per_call" if comparison["per_call"] else ""
    for label, rows in comparison["tables"].items():
        console.print(Text(f"\n{label} vs {comparison['against']}, by stage ({basis}; tracekit diff)", style="bold"))
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
        for name in ("stage", "change", comparison["against"], label, "delta", "delta %", "ratio"):
            table.add_column(name, justify="left" if name in ("stage", "change") else "right", overflow="fold")
        scale = _time_scale(rows, suffix)  # one time unit for the table's durations
        for r in rows:
            table.add_row(
                r["stage"],
                r["change"],
                format_ns_as(r[f"a_ns{suffix}"], scale),
                format_ns_as(r[f"b_ns{suffix}"], scale),
                format_ns_as(r[f"delta_ns{suffix}"], scale),
                fmt(r["delta_pct"], "pct"),
                fmt(r["ratio"], "x"),
            )
        console.print(table)


# ---- HTML -------------------------------------------------------------------

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1180px;
       color: #222; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 32px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; } h3 { font-size: 14px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 8px 0; } th, td { padding: 3px 8px; border-bottom: 1px solid #eee;
        vertical-align: top; } thead th { border-bottom: 2px solid #bbb; text-align: right; }
thead th:first-child { text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums;
        white-space: nowrap; } tbody th { text-align: left; font-weight: 600; white-space: nowrap; }
td.num.wrap { white-space: normal; } .scroll { overflow-x: auto; }
table.many { table-layout: fixed; width: 100%; font-size: 12.5px; } table.many thead th:first-child { width: 190px; }
table.many td.num, table.many thead th { white-space: normal; overflow-wrap: anywhere; }
td.text { max-width: 520px; word-break: break-all; } code { background: #f4f4f4; padding: 1px 4px; }
.muted { color: #666; } nav a { margin-right: 12px; } ul.findings { padding-left: 18px; }
.sev { font-size: 11px; font-weight: 700; text-transform: uppercase; padding: 1px 6px; border-radius: 3px; }
.sev.warning { background: #fde68a; } .sev.info { background: #bae6fd; }
li.finding { margin-bottom: 8px; } svg.plot { display: block; margin: 6px 0 14px; max-width: 100%;
        height: auto; } table.evidence { font-size: 12px; } tr.group th { padding-top: 10px; color: #555; }
"""


def _data(v) -> str:
    """Exact text of a value for a data-value attribute (repr for floats: round-trips)."""
    return "" if v is None else repr(v) if isinstance(v, float) else str(v)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def _evidence_id(index: int, finding_id: str) -> str:
    return f"ev-{index}-{_slug(finding_id)}"


def html(report: Report) -> str:
    """The report as one HTML document (a string)."""
    labels = [t.label for t in report.traces]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>tracekit report: {escape(', '.join(labels))}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>Attention report</h1>",
        f'<p class="muted">{len(labels)} trace(s): '
        + ", ".join(f"<b>{escape(t.label)}</b> ({escape(t.source)})" for t in report.traces)
        + (f"; the first ({escape(labels[0])}) is the baseline" if len(labels) > 1 else "")
        + f". tracekit {escape(report.version)}.</p>",
        '<nav><a href="#headline">Headline</a><a href="#breakdown">GPU time</a><a href="#findings">What stands out</a>'
        '<a href="#stages">Stages</a><a href="#timeline">Timeline</a><a href="#steps">Steps</a>'
        '<a href="#roofline">Throughput</a>'
        + ('<a href="#comparison">Comparison</a>' if report.comparison else "")
        + '<a href="#evidence">Evidence</a></nav>',
    ]
    parts += _headline(report)
    parts += report_breakdown.html(report)
    parts += _findings(report)
    parts += _plots(report)
    if report.comparison:
        parts += _comparison(report)
    parts += _evidence(report)
    parts.append(
        '<p class="muted">Made by <code>tracekit report</code>; every number is also in '
        "<code>--json</code>.</p></body></html>"
    )
    return "\n".join(parts) + "\n"


def _headline(report: Report) -> list[str]:
    out = [
        '<section id="headline"><h2>Headline</h2>',
        f'<div class="scroll"><table class="{report_breakdown.table_class("headline", len(report.traces))}">'
        "<thead><tr><th>metric</th>",
    ]
    out += [f"<th>{escape(t.label)}</th>" for t in report.traces]
    out.append("</tr></thead><tbody>")
    for key, label, unit, how in _rows(report):
        if key.startswith("stage_share_pct.") and key.endswith("." + report.stages[0]):
            out.append(
                f'<tr class="group"><th colspan="{len(report.traces) + 1}">'
                "Stage breakdown (share of GPU time)</th></tr>"
            )
        out.append(f'<tr><th title="{escape(how)}">{escape(label)}</th>')
        css = "num wrap" if unit == "text" else "num"
        for t in report.traces:
            v = value(t, key)
            out.append(
                f'<td class="{css}" data-trace="{escape(t.label)}" data-key="{escape(key)}" '
                f'data-value="{escape(_data(v))}">{escape(fmt(v, unit))}</td>'
            )
        out.append("</tr>")
    out.append("</tbody></table></div>")
    out.append("<details><summary>How each number is computed</summary><ul>")
    out += [f"<li><b>{escape(m.label)}</b>: {escape(m.how)}.</li>" for m in report.metrics]
    out.append("<li><b>stage …</b>: stage_breakdown.share_pct (orphans left out).</li></ul></details></section>")
    return out


def _explains(f) -> str:
    """The GPU time a finding explains, for its line: '1.2 ms, 4.5 % of the GPU span' ('' when none)."""
    if f.explains_ns is None:
        return ""
    share = f", {f.explains_pct:.1f} % of the GPU span" if f.explains_pct is not None else ""
    return f"{fmt(f.explains_ns, 'ns')}{share}"


def _findings(report: Report) -> list[str]:
    """What stands out, as the terminal lists it: one entry per finding (``Report.findings``) naming the traces
    it holds for, the heaviest trace's line first and the others' below it, each linked to its evidence."""
    out = ['<section id="findings"><h2>What stands out</h2>']
    groups = report.findings()
    if not groups:
        out.append("<p>Nothing: no finding fired.</p></section>")
        return out
    index = {t.label: i for i, t in enumerate(report.traces)}
    by_label = {t.label: t for t in report.traces}
    listed = {id(f) for _, f in report.all_findings()}  # those with evidence tables (comparisons have none)

    def line(label: str, f) -> str:
        size = _explains(f)
        link = ""
        if id(f) in listed:
            anchor = _evidence_id(index[label], f.id)
            link = f'<a href="#{anchor}">{f.rows_total} row{"s" if f.rows_total != 1 else ""}</a> '
        hint = f.hint or _hint(by_label[label], f.query)
        return (
            f"{escape(f.message)} "
            + (f'<span class="muted">({escape(size)})</span> ' if size else "")
            + link
            + f"<code>{escape(hint)}</code>"
        )

    def attr(f) -> str:  # a finding with evidence rows, or a comparison's (tracekit diff shows its rows)
        return "data-finding" if id(f) in listed else "data-comparison"

    out.append('<ul class="findings">')
    for g in groups:
        (label, f), others = g.members[0], g.members[1:]
        out.append(
            f'<li class="finding {escape(g.severity)}" {attr(f)}="{escape(g.id)}" data-trace="{escape(label)}">'
            f'<span class="sev {escape(g.severity)}">{escape(g.severity)}</span> '
            f"<b>{escape(g.title)}:</b> {escape(', '.join(g.traces))}<br>"
            + (f"<b>{escape(label)}</b>: " if others else "")
            + line(label, f)
        )
        if others:
            out.append('<ul class="also">')
            for other, o in others:
                out.append(
                    f'<li class="finding {escape(o.severity)}" {attr(o)}="{escape(o.id)}" '
                    f'data-trace="{escape(other)}"><b>{escape(other)}</b>: {line(other, o)}</li>'
                )
            out.append("</ul>")
        out.append("</li>")
    out.append("</ul></section>")
    return out


def _plots(report: Report) -> list[str]:
    out = [
        '<section id="stages"><h2>Stage breakdown</h2>',
        (
            '<p class="muted">Share of each trace\'s GPU op time by attention stage (stage_breakdown; '
            "orphans left out).</p>"
        ),
    ]
    bars = [(t.label, t.headline["stage_share_pct"]) for t in report.traces]
    out.append(plots.stacked_bars(bars, report.stages) if report.stages else "<p>No GPU ops.</p>")
    if report.stages:
        out += _left_out(
            report, [t for t in report.traces if not any(t.headline["stage_share_pct"].values())], "no GPU ops"
        )
    out.append("</section>")

    out.append(
        '<section id="timeline"><h2>One attention call per step on the GPU</h2>'
        '<p class="muted">The GPU ops of the first attention call of each profiler step (call_timeline, '
        f"call_in_step = 1; at most {report.timeline_calls} calls), coloured by stage; x is time since the call's first "
        "GPU op, so gaps are the GPU waiting inside the call.</p>"
    )
    drawn = False
    for t in report.traces:
        lanes: dict = {}
        for r in t.timeline:
            name = f"step {r['step']}" if r["step"] is not None else f"call {r['call_id']}"
            lanes.setdefault(name, []).append(r)
        if lanes:
            drawn = True
            out.append(plots.timeline(f"{t.label} ({t.headline['impl']})", list(lanes.items())))
    if not drawn:
        calls = sum(len(t.calls) for t in report.traces)
        out.append(
            f"<p>No attention call ran GPU ops in the trace ({calls} call{'s' if calls != 1 else ''} found on the "
            "CPU only: a capture pass, or GPU work outside the trace).</p>"
            if calls
            else "<p>No attention calls.</p>"
        )
    else:
        out += _left_out(report, [t for t in report.traces if not t.timeline], "no attention call with GPU ops")
    out.append("</section>")

    out.append(
        '<section id="steps"><h2>Kernel time per step</h2>'
        '<p class="muted">Summed GPU op time of each profiler step (step_summary.kernel_ns), one dot '
        "per step, the black tick at the median; a log axis so traces of any size share it.</p>"
    )
    groups = [(t.label, [(r["step_name"], r["kernel_ns"]) for r in t.steps]) for t in report.traces if t.steps]
    out.append(plots.strip("Kernel time per step", groups) if groups else "<p>No ProfilerStep ranges.</p>")
    if groups:
        out += _left_out(report, [t for t in report.traces if not t.steps], "no ProfilerStep ranges")
    out.append("</section>")

    out.append(
        '<section id="roofline"><h2>Attention throughput</h2>'
        '<p class="muted">One dot per attention call whose shapes are known (record_shapes): x is its '
        "FLOPs (attention_calls.flops = 4·B·H·Sq·Skv·D, halved when causal; log scale), y the achieved "
        "TFLOP/s at kernel-level time (attention_calls.tflops_per_s). Arithmetic intensity is not "
        "plotted: the trace does not record the bytes a fused kernel moves.</p>"
    )
    points = [
        {"series": t.label, "label": f"call {c['call_id']}", "x": c["flops"], "y": c["tflops_per_s"]}
        for t in report.traces
        for c in t.calls
        if c["flops"] and c["tflops_per_s"]
    ]
    out.append(
        plots.scatter("Achieved TFLOP/s per attention call", points, "FLOPs per call", "TFLOP/s")
        if points
        else "<p>No attention call with known shapes.</p>"
    )
    if points:
        plotted = {p["series"] for p in points}
        out += _left_out(
            report,
            [t for t in report.traces if t.label not in plotted],
            "no attention call with recorded shapes (record_shapes=True) and kernel time",
        )
    out.append("</section>")
    return out


def _left_out(report: Report, traces: list, why: str) -> list[str]:
    """One line naming the traces a plot leaves out and why (nothing when it draws them all)."""
    if not traces:
        return []
    labels = ", ".join(f"<b>{escape(t.label)}</b>" for t in traces)
    return [f'<p class="muted left-out" data-traces="{len(traces)}">Not drawn: {labels} ({escape(why)}).</p>']


def _comparison(report: Report) -> list[str]:
    comparison = report.comparison
    assert comparison is not None  # only called for a report that compares
    suffix = "_per_call" if comparison["per_call"] else ""
    basis = "per attention call" if comparison["per_call"] else "totals"
    out = [
        '<section id="comparison"><h2>Comparison with the first trace</h2>',
        (
            f'<p class="muted">GPU time by stage against <b>{escape(comparison["against"])}</b> ({basis}), '
            "sorted by impact; the same as <code>tracekit diff</code>.</p>"
        ),
    ]
    for label, rows in comparison["tables"].items():
        scale = _time_scale(rows, suffix)  # one time unit for the table's durations
        out.append(f"<h3>{escape(label)} vs {escape(comparison['against'])}</h3>")
        out.append(
            f'<div class="scroll"><table class="diff" data-trace="{escape(label)}"><thead><tr>'
            "<th>stage</th><th>change</th>"
            f"<th>GPU ops {escape(comparison['against'])}</th><th>GPU ops {escape(label)}</th>"
            f"<th>{escape(comparison['against'])}</th><th>{escape(label)}</th><th>delta</th><th>delta %</th>"
            "<th>ratio</th></tr></thead><tbody>"
        )
        for r in rows:
            cells = [
                ("a_gpu_ops" + suffix, "num"),
                ("b_gpu_ops" + suffix, "num"),
                ("a_ns" + suffix, "ns"),
                ("b_ns" + suffix, "ns"),
                ("delta_ns" + suffix, "ns"),
                ("delta_pct", "pct"),
                ("ratio", "x"),
            ]
            out.append(f"<tr><th>{escape(r['stage'])}</th><td>{escape(r['change'])}</td>")
            out += [
                f'<td class="num" data-key="{key}" data-value="{escape(_data(r[key]))}">'
                f"{escape(format_ns_as(r[key], scale) if unit == 'ns' else fmt(r[key], unit))}</td>"
                for key, unit in cells
            ]
            out.append("</tr>")
        out.append("</tbody></table></div>")
    out.append("</section>")
    return out


EVIDENCE_NAME_CHARS = 60  # a kernel or op name in an evidence cell: shortened (names.shorten), whole in its title


def _evidence_columns(f):
    import pyarrow as pa

    from tracekit.present import humanize

    if not f.rows:
        return [humanize.Column(c, c, "text") for c in f.columns]
    return humanize.columns(pa.Table.from_pylist([{c: r[c] for c in f.columns} for r in f.rows]))


def _timestamps(f) -> tuple[list[str], int | None]:
    """The point-in-time columns of an evidence table (``ts_ns``, ``start_ns``, ``end_ns``) and the earliest
    of their values: shown relative to it, as time since the first row's event."""
    from tracekit.present import humanize

    stamps = [c for c in f.columns if humanize.is_timestamp(c)]
    values = [r[c] for r in f.rows for c in stamps if isinstance(r[c], (int, float))]
    return stamps, (min(values) if values else None)


def headers(f) -> list[str]:
    """An evidence table's headers: the columns with their display units (``gpu_ns`` -> ``gpu_µs``); a point
    in time as its offset from the table's earliest (``ts_ns`` -> ``ts (+µs)``)."""
    stamps, base = _timestamps(f)
    unit = _offset_unit(f, stamps, base)
    return [
        f"{c.name.removesuffix('_ns')} (+{unit[0]})" if c.name in stamps and base is not None else c.header
        for c in _evidence_columns(f)
    ]


def _offset_unit(f, stamps, base) -> tuple[str, float]:
    from tracekit.present.values import time_unit

    spans = [r[c] - base for r in f.rows for c in stamps if base is not None and isinstance(r[c], (int, float))]
    return time_unit(max(spans, default=0))


def _evidence_cells(f) -> list[list[tuple[str, str]]]:
    """(css class, display text) of every evidence cell: humanized like the terminal's tables, kernel names
    shortened (templates and namespaces elided), points in time relative to the table's earliest."""
    from tracekit.common import names
    from tracekit.present.values import duration_number

    cols = _evidence_columns(f)
    stamps, base = _timestamps(f)
    _, scale = _offset_unit(f, stamps, base)
    out = []
    for r in f.rows:
        row = []
        for c in cols:
            v = r[c.name]
            if c.name in stamps and base is not None and isinstance(v, (int, float)):
                row.append(("num", duration_number(v - base, scale)))
            elif c.numeric:
                row.append(("num", c.text(v)))
            else:
                row.append(("text", names.shorten(c.text(v), EVIDENCE_NAME_CHARS)))
        out.append(row)
    return out


def _evidence(report: Report) -> list[str]:
    out = [
        '<section id="evidence"><h2>Evidence</h2>',
        (
            '<p class="muted">The rows behind each finding: the finding\'s query, filtered to the trace '
            f"(at most {findings.MAX_ROWS} rows shown; the command lists them all).</p>"
        ),
    ]
    listed = {id(f) for _, f in report.all_findings()}  # the findings "What stands out" lists, no others
    for i, t in enumerate(report.traces):
        for f in (f for f in t.findings if id(f) in listed):
            out.append(
                f'<h3 id="{_evidence_id(i, f.id)}">{escape(t.label)}: {escape(f.title)} '
                f'<span class="muted">({f.rows_total} rows; <code>{escape(_hint(t, f.query))}</code>)</span></h3>'
            )
            out.append(
                f'<div class="scroll"><table class="evidence" data-finding="{escape(f.id)}" '
                f'data-trace="{escape(t.label)}"><thead><tr>'
                + "".join(f"<th>{escape(h)}</th>" for h in headers(f))
                + "</tr></thead><tbody>"
            )
            for r, shown in zip(f.rows, _evidence_cells(f)):
                out.append(
                    "<tr>"
                    + "".join(
                        f'<td class="{css}" title="{escape(cell(r[c], exact=True))}">{escape(text)}</td>'
                        for c, (css, text) in zip(f.columns, shown)
                    )
                    + "</tr>"
                )
            out.append("</tbody></table></div>")
    out.append("</section>")
    return out
