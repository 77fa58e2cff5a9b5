"""Inline SVG plots for the HTML report: plain strings, no JavaScript, no network.

Each function returns one ``<svg class="plot plot-KIND">`` element; hovering a
mark shows its ``<title>`` (the browser's tooltip). Stages keep one colour in
every plot.
"""

from __future__ import annotations

import math
from html import escape

from tracekit.common import names
from tracekit.present.values import format_unit
from tracekit.schema import stages

STAGE_COLORS = stages.colours()
_EXTRA = ("#e6ab02", "#a6761d", "#666666", "#1b9e77", "#e7298a", "#66a61e")
# Okabe & Ito's colour-blind-safe palette (stage colours in capture/stages.csv use it too).
SERIES_COLORS = ("#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#f0e442", "#000000")
FONT = 'font-family="system-ui, sans-serif" font-size="12"'
WIDTH = 920


def stage_color(stage: str) -> str:
    """The colour of a stage (unknown stages get a stable extra colour)."""
    if stage in STAGE_COLORS:
        return STAGE_COLORS[stage]
    return _EXTRA[sum(map(ord, stage)) % len(_EXTRA)]


def _text_color(fill: str) -> str:
    """Black or white, whichever reads on ``fill`` (#rrggbb)."""
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "#000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#fff"


def _svg_element(kind: str, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg class="plot plot-{kind}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(label)}" {FONT}>'
        + "".join(body)
        + "</svg>"
    )


def _text(x, y, text, anchor="start", extra="") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{escape(str(text))}</text>'


LABEL_CHARS = 36  # a row label longer than this is cut in the middle; its <title> holds it whole
CHAR_PX = 7.4  # widest average glyph width at font-size 12 (digits, capitals), so labels are never clipped


def _margin(labels) -> int:
    """Left margin that fits the (cut) row labels without clipping them."""
    longest = max((len(names.shorten(str(x), LABEL_CHARS)) for x in labels), default=8)
    return int(min(WIDTH // 3, max(80, 16 + CHAR_PX * longest)))


def _row_label(x, y, label: str) -> str:
    """A row label ending at ``x``: cut in the middle when long, the whole text as its tooltip."""
    short = names.shorten(str(label), LABEL_CHARS)
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="end"><title>{escape(str(label))}</title>{escape(short)}</text>'


def _tick_label(v: float) -> str:
    """Compact tick label."""
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-2:
        exponent = math.floor(math.log10(abs(v)))
        mantissa = v / 10**exponent
        return f"{mantissa:g}e{exponent}"
    return f"{v:,.6g}"


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """Round tick values (1, 2, 5 x 10^k steps) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _legend(x0: float, y: float, items: list[tuple[str, str]]) -> tuple[list[str], float]:
    """Legend swatches laid out in rows; returns the elements and the y below them."""
    out, x = [], x0
    for label, color in items:
        w = 18 + 7 * len(label) + 14
        if x + w > WIDTH - 10:
            x, y = x0, y + 18
        out.append(f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="12" height="12" fill="{color}"/>')
        out.append(_text(x + 16, y, label))
        x += w
    return out, y + 18


def stacked_bars(bars: list[tuple[str, dict[str, float]]], stages: list[str]) -> str:
    """Horizontal 100 % bars, one per trace, split by stage share (percent of GPU time)."""
    left, right, row = _margin(label for label, _ in bars), WIDTH - 20, 28
    span = right - left
    body = []
    y: float = 24
    body.append(_text(left, 14, "share of GPU time (%)", extra=' fill="#555"'))
    for label, shares in bars:
        body.append(_row_label(left - 8, y + 16, label))
        x: float = left
        for stage in stages:
            share = shares.get(stage) or 0.0
            if share <= 0:
                continue
            w = span * share / 100.0
            body.append(
                f'<rect class="seg" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row - 6}" '
                f'fill="{stage_color(stage)}"><title>{escape(label)} · {escape(stage)}: '
                f"{share:.1f} %</title></rect>"
            )
            if w > 44:
                body.append(
                    _text(
                        x + w / 2,
                        y + 16,
                        f"{share:.0f}%",
                        anchor="middle",
                        extra=f' fill="{_text_color(stage_color(stage))}"',
                    )
                )
            x += w
        y += row
    for t in (0, 25, 50, 75, 100):
        tick = left + span * t / 100
        body.append(f'<line x1="{tick:.1f}" x2="{tick:.1f}" y1="20" y2="{y}" stroke="#999" stroke-dasharray="2,3"/>')
        body.append(_text(tick, y + 14, t, anchor="middle"))
    legend, y = _legend(left, y + 36, [(s, stage_color(s)) for s in stages])
    return _svg_element("stages", int(y), body + legend, "Stage breakdown per trace")


def timeline(title: str, lanes: list[tuple[str, list[dict]]]) -> str:
    """GPU ops of attention calls on a shared time axis (µs from the call's first GPU op), one lane each.

    Each op dict has ``start_ns``, ``dur_ns``, ``stage`` and ``name``.
    """
    left, right, row = 110, WIDTH - 20, 24
    end = max((op["start_ns"] + op["dur_ns"] for _, ops in lanes for op in ops), default=1) or 1
    span = right - left
    body = [_text(8, 14, title, extra=' font-weight="600"')]
    y: float = 24
    stages_seen: list[str] = []
    for lane, ops in lanes:
        body.append(_row_label(left - 8, y + 15, lane))
        body.append(f'<line x1="{left}" x2="{right}" y1="{y + row - 3}" y2="{y + row - 3}" stroke="#eee"/>')
        for op in ops:
            x = left + span * op["start_ns"] / end
            w = max(span * op["dur_ns"] / end, 1.0)
            if op["stage"] not in stages_seen:
                stages_seen.append(op["stage"])
            name = op["name"] if len(op["name"]) <= 90 else op["name"][:89] + "…"
            body.append(
                f'<rect class="op" x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{row - 8}" '
                f'fill="{stage_color(op["stage"])}"><title>{escape(op["stage"])}: {escape(name)} '
                f"({format_unit(op['dur_ns'], 'us')} at +{format_unit(op['start_ns'], 'us')})</title></rect>"
            )
        y += row
    for t in nice_ticks(0, end / 1e3):
        x = left + span * t * 1e3 / end
        if x <= right + 0.5:
            body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + 4}" stroke="#333"/>')
            body.append(_text(x, y + 16, _tick_label(t), anchor="middle"))
    body.append(_text(right, y + 30, "µs from the call's first GPU op", anchor="end", extra=' fill="#555"'))
    legend, y = _legend(left, y + 50, [(s, stage_color(s)) for s in stages_seen])
    return _svg_element("timeline", int(y), body + legend, title)


def _log_axis(lo: float, hi: float) -> tuple[float, float]:
    lo, hi = math.log10(lo), math.log10(hi)
    if hi - lo < 0.5:
        mid = (lo + hi) / 2
        lo, hi = mid - 0.5, mid + 0.5
    return lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo)


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Decades (and 2x, 5x within them when few decades) between 10^lo and 10^hi."""
    out = []
    for k in range(math.floor(lo), math.ceil(hi) + 1):
        for m in (1,) if hi - lo > 3 else (1, 2, 5):
            v = math.log10(m) + k
            if lo <= v <= hi:
                out.append(v)
    return out


def strip(
    title: str, groups: list[tuple[str, list[tuple[str, float]]]], unit_scale: float = 1e3, unit: str = "µs"
) -> str:
    """One row of dots per group on a shared log axis, with the group's median marked.

    ``groups``: (row label, [(point label, value in ns)]).
    """
    values = [v for _, pts in groups for _, v in pts if v and v > 0]
    left, right, row = _margin(label for label, _ in groups), WIDTH - 20, 28
    span = right - left
    body = [_text(8, 14, title, extra=' font-weight="600"')]
    lo, hi = _log_axis(min(values) / unit_scale, max(values) / unit_scale) if values else (0, 1)

    def px(v):
        return left + span * (math.log10(v / unit_scale) - lo) / (hi - lo)

    y = 28
    for i, (label, pts) in enumerate(groups):
        color = SERIES_COLORS[i % len(SERIES_COLORS)]
        body.append(_row_label(left - 8, y + 4, label))
        body.append(f'<line x1="{left}" x2="{right}" y1="{y}" y2="{y}" stroke="#eee"/>')
        vals = sorted(v for _, v in pts if v and v > 0)
        for name, v in pts:
            if v and v > 0:
                body.append(
                    f'<circle class="pt" cx="{px(v):.2f}" cy="{y}" r="4.5" fill="{color}" fill-opacity="0.7">'
                    f"<title>{escape(label)} · {escape(name)}: {v / unit_scale:,.1f} {unit}</title></circle>"
                )
        if vals:
            n = len(vals)
            med = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
            body.append(
                f'<line class="median" x1="{px(med):.2f}" x2="{px(med):.2f}" y1="{y - 9}" y2="{y + 9}" '
                f'stroke="#000" stroke-width="2"><title>median {med / unit_scale:,.1f} {unit}</title></line>'
            )
        y += row
    for t in _log_ticks(lo, hi):
        x = left + span * (t - lo) / (hi - lo)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="16" y2="{y - 12}" stroke="#ccc" stroke-dasharray="2,3"/>')
        body.append(_text(x, y + 2, _tick_label(10**t), anchor="middle"))
    body.append(_text(right, y + 18, f"{unit} (log scale)", anchor="end", extra=' fill="#555"'))
    return _svg_element("steps", y + 26, body, title)


def scatter(title: str, points: list[dict], x_label: str, y_label: str) -> str:
    """Points (``series``, ``label``, ``x``, ``y``) with a log x axis and a linear y axis from 0."""
    left, right, top, bottom = 70, WIDTH - 20, 30, 300
    xs = [p["x"] for p in points]
    ys = [p["y"] for p in points]
    lo, hi = _log_axis(min(xs), max(xs))
    ymax = nice_ticks(0, max(ys) * 1.1 or 1)[-1]
    ymax = ymax if ymax >= max(ys) else max(ys) * 1.1
    body = [_text(8, 16, title, extra=' font-weight="600"')]
    for t in nice_ticks(0, ymax):
        y = bottom - (bottom - top) * t / ymax
        body.append(f'<line x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        body.append(_text(left - 6, y + 4, _tick_label(t), anchor="end"))
    for t in _log_ticks(lo, hi):
        x = left + (right - left) * (t - lo) / (hi - lo)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}" stroke="#eee"/>')
        body.append(_text(x, bottom + 16, _tick_label(10**t), anchor="middle"))
    body.append(f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#333"/>')
    body.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{bottom}" stroke="#333"/>')
    body.append(_text((left + right) / 2, bottom + 34, x_label, anchor="middle", extra=' fill="#555"'))
    body.append(
        _text(
            14,
            (top + bottom) / 2,
            y_label,
            anchor="middle",
            extra=f' fill="#555" transform="rotate(-90 14 {(top + bottom) / 2:.1f})"',
        )
    )
    series: list[str] = []
    for p in points:
        if p["series"] not in series:
            series.append(p["series"])
        color = SERIES_COLORS[series.index(p["series"]) % len(SERIES_COLORS)]
        x = left + (right - left) * (math.log10(p["x"]) - lo) / (hi - lo)
        y = bottom - (bottom - top) * p["y"] / ymax
        body.append(
            f'<circle class="pt" cx="{x:.2f}" cy="{y:.2f}" r="5" fill="{color}" fill-opacity="0.75">'
            f"<title>{escape(p['series'])} · {escape(p['label'])}: {p['x']:.4g} FLOP, "
            f"{p['y']:.1f} TFLOP/s</title></circle>"
        )
    legend, y = _legend(left, bottom + 58, [(s, SERIES_COLORS[i % len(SERIES_COLORS)]) for i, s in enumerate(series)])
    return _svg_element("roofline", int(y), body + legend, title)
