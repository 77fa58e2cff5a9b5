"""The report's breakdown section: where the rest of the GPU's time goes.

Per trace: gpu_breakdown's categories (computation, exposed communication,
exposed memcpy, idle: they add up to the span), then the heaviest ops
(op_summary) and nn.Module classes (module_summary). Rendered for the
terminal (rich) and the HTML page from ``TraceReport`` data only.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from tracekit.present import humanize
from tracekit.present.values import format_ns_as
from tracekit.present.values import format_unit as fmt

if TYPE_CHECKING:
    from tracekit.analysis.report import Report, TraceReport

# The categories that add up to the span, then the totals they come from.
PARTS = ("computation", "exposed_communication", "exposed_memcpy", "idle")
TOTALS = ("communication", "memcpy", "busy", "total")


MANY_TRACES = 4  # past this many trace columns a table fits the page: fixed layout, cells wrap


def table_class(name: str, traces: int) -> str:
    """The class of a table with one column per trace: ``many`` past ``MANY_TRACES`` (it wraps to fit)."""
    return f"{name} many" if traces > MANY_TRACES else name


def _times(trace: TraceReport) -> dict[str, tuple[int, float | None]]:
    return {r["category"]: (r["time_ns"], r["pct"]) for r in trace.breakdown}


def line(trace: TraceReport) -> str:
    """One line: each part's time and share of the span."""
    times = _times(trace)
    if not times or not times.get("total", (0, None))[0]:
        return "no GPU ops"
    parts = [
        f"{category.replace('_', ' ')} {fmt(times[category][0], 'ns')} ({fmt(times[category][1], 'pct')})"
        for category in PARTS
    ]
    return ", ".join(parts) + f"; span {fmt(times['total'][0], 'ns')}"


def terminal(report: Report, console) -> None:
    """Print the section: the breakdown line, top ops and top modules of each trace."""
    from rich.text import Text

    console.print(Text("Where the GPU's time goes (gpu_breakdown, op_summary, module_summary)", style="bold"))
    width = max(40, console.width)

    def wrapped(text: str, bold: int = 0) -> None:
        for k, part in enumerate(humanize.prose(text, width, text[: len(text) - len(text.lstrip())], "      ")):
            shown = Text(part)
            if k == 0 and bold:
                shown.stylize("bold", 0, bold)
            console.print(shown, soft_wrap=True)

    for trace in report.traces:
        wrapped(f"  {trace.label}: {line(trace)}", bold=len(trace.label) + 3)
        if trace.top_ops:
            # With its category, as the HTML list has it: op_summary's rows are (op, category), and a
            # graph replay's kernels, which have no op, would read "(no CPU op)" once per category.
            ops = ", ".join(f"{r['op']} ({r['category']}) {fmt(r['share_pct'], 'pct')}" for r in trace.top_ops)
            wrapped(f"    top ops: {ops}")
        if trace.top_modules:
            modules = ", ".join(f"{r['module']} {fmt(r['share_pct'], 'pct')}" for r in trace.top_modules)
            wrapped(f"    top modules: {modules}")


def html(report: Report) -> list[str]:
    """The section as HTML: one table of the breakdown, one list of top ops and modules per trace."""
    out = [
        '<section id="breakdown"><h2>Where the GPU\'s time goes</h2>',
        '<p class="muted">gpu_breakdown: computation + exposed communication + exposed memcpy + idle = the '
        "span from the first GPU op to the last; communication and memcpy are totals, overlap included.</p>",
        # Scrolls inside its box like the headline table: many traces with long labels stay on the page.
        f'<div class="scroll"><table class="{table_class("breakdown", len(report.traces))}"><thead><tr><th>category</th>'
        + "".join(f"<th>{escape(trace.label)}</th>" for trace in report.traces)
        + "</tr></thead><tbody>",
    ]
    for category in PARTS + TOTALS:
        cells = []
        for trace in report.traces:
            times = _times(trace)
            ns, pct = times.get(category, (None, None))
            shown = format_ns_as(ns, times.get("total", (None, None))[0])  # one unit per trace's column
            glued = (escape(shown).replace(" ", "&nbsp;"), escape(fmt(pct, "pct")).replace(" ", "&nbsp;"))
            cells.append(f'<td class="num">{glued[0]} ({glued[1]})</td>')  # a narrow cell wraps before "("
        out.append(f"<tr><th>{escape(category.replace('_', ' '))}</th>{''.join(cells)}</tr>")
    out.append("</tbody></table></div>")
    for trace in report.traces:
        if not (trace.top_ops or trace.top_modules):
            continue
        out.append(f'<h3>{escape(trace.label)}</h3><ul style="word-break: break-all">')
        for r in trace.top_ops:
            out.append(
                f"<li>op <code>{escape(r['op'])}</code> ({escape(r['category'])}): {escape(fmt(r['kernel_ns'], 'ns'))}, "
                f"{escape(fmt(r['share_pct'], 'pct'))} of GPU op time, {r['calls']} calls</li>"
            )
        for r in trace.top_modules:
            out.append(
                f"<li>module <code>{escape(r['module'])}</code>: {escape(fmt(r['gpu_ns'], 'ns'))} "
                f"({escape(fmt(r['share_pct'], 'pct'))}), self {escape(fmt(r['self_gpu_ns'], 'ns'))}, "
                f"{r['calls']} calls</li>"
            )
        out.append("</ul>")
    out.append("</section>")
    return out
