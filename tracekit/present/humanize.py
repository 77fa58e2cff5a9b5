"""Rows for people: the ``table`` format of every command (and the HTML evidence tables).

A column's unit comes from its name: ``*_ns`` (or ``_ns_`` inside: ``delta_ns_per_call``)
is a duration in nanoseconds, shown in µs, ms or s (one unit per column, chosen from its
largest value, and written into the header: ``gpu_ns`` -> ``gpu_µs``); ``*_pct`` is a
percentage; ``*_bytes`` a size (KB, MB or GB, named in the header); ``ratio`` a factor (``0.51x``); other numbers get thousands separators (ids do
not). Mangled kernel names are demangled and long text is cut in the middle
(``names.shorten_all``: the distinguishing tail stays and distinct names stay distinct).
The table fits ``width`` columns (``wide``: no limit) and shows ``rows`` rows with a line
saying how many more there are. csv, json, ndjson and parquet keep the raw values.
"""

from __future__ import annotations

import decimal
import io
import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.common import background, names
from tracekit.present.values import duration_number, plain, time_unit

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_WIDTH = 100
DEFAULT_ROWS = 40
MIN_TEXT = 16  # a text column is never cut below this many characters (stage names stay whole)


def preload() -> None:
    """Start importing rich (what ``table_text`` draws with) on a background thread.

    For the CLI about to build a linked cache entry: the build's DuckDB statements release
    the GIL, so the import is done on the other core by the time the first table prints
    (it would otherwise run after the build, on the answer's critical path).
    """
    background.imports("rich.box", "rich.console", "rich.table")


_NS_COLUMN = re.compile(r"(^|_)ns($|_)")
_ID_COLUMN = re.compile(r"(^|_)(id|ids|pid|tid|correlation|rank|step|order|version|year)$")
_BYTES_COLUMN = re.compile(r"(^|_)(bytes)($|_)")
_BYTE_UNITS = (("B", 1, 1e4), ("KB", 1e3, 1e7), ("MB", 1e6, 1e10), ("GB", 1e9, math.inf))
_TIMESTAMP = re.compile(r"(^|_)(ts|end|start)_ns$")


@dataclass(frozen=True)
class Column:
    """How one column is shown: its header and how a value becomes text."""

    name: str
    header: str
    kind: str  # time, size, pct, ratio, int, id, float, text, other
    scale: float = 1.0
    numeric: bool = False

    def text(self, value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (list, dict)):
            return json.dumps(plain(value), separators=(",", ":"))
        if isinstance(value, decimal.Decimal):  # sum() of BIGINT is HUGEINT / DECIMAL in DuckDB
            value = int(value) if value == value.to_integral_value() else float(value)
        if self.kind == "time":
            return duration_number(value, self.scale)
        if self.kind == "size":
            return f"{value / self.scale:,.1f}"
        if self.kind == "pct":
            return f"{value:,.1f}"
        if self.kind == "ratio":
            return f"{value:,.2f}x"
        if self.kind == "id":
            return str(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                return repr(value)
            if value == int(value) and abs(value) < 1e15:
                return f"{int(value):,}"
            return f"{value:,.3f}".rstrip("0").rstrip(".")
        if isinstance(value, int):
            return f"{value:,}"
        if isinstance(value, str):
            return names.readable(value)
        return str(plain(value))


def column(name: str, arrow_type, values: list) -> Column:
    """The display rule for column ``name`` of ``arrow_type`` holding ``values``."""
    import pyarrow as pa

    numeric = pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type)
    if not numeric:
        kind = "text" if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) else "other"
        return Column(name, name, kind)
    if _TIMESTAMP.search(name):  # a point in time (epoch-scale ns), not a duration: exact
        return Column(name, name, "id", numeric=True)
    if _NS_COLUMN.search(name):
        biggest = max((abs(float(v)) for v in values if v is not None), default=0.0)
        unit, scale = time_unit(biggest)
        return Column(
            name, _NS_COLUMN.sub(lambda m: f"{m.group(1)}{unit}{m.group(2)}", name, count=1), "time", scale, True
        )
    if _BYTES_COLUMN.search(name) and not name.endswith("_per_byte"):
        biggest = max((abs(float(v)) for v in values if v is not None), default=0.0)
        unit, scale = next((u, s) for u, s, below in _BYTE_UNITS if biggest < below)
        if unit == "B":
            return Column(name, name, "int", numeric=True)
        header = _BYTES_COLUMN.sub(lambda m: f"{m.group(1)}{unit}{m.group(3)}", name, count=1)
        return Column(name, header, "size", scale, True)
    if name.endswith("pct") or name.endswith("_percent"):
        return Column(name, name, "pct", numeric=True)
    if name == "ratio" or name.endswith("_ratio"):
        return Column(name, name, "ratio", numeric=True)
    if _ID_COLUMN.search(name) and pa.types.is_integer(arrow_type):
        return Column(name, name, "id", numeric=True)
    return Column(name, name, "float" if pa.types.is_floating(arrow_type) else "int", numeric=True)


def columns(table: pa.Table) -> list[Column]:
    return [column(f.name, f.type, table.column(f.name).to_pylist()) for f in table.schema]


def cells(table: pa.Table) -> tuple[list[Column], list[list[str]]]:
    """Display rules and display text of every row (nothing cut)."""
    cols = columns(table)
    rows = table.to_pylist()
    return cols, [[c.text(r[c.name]) for c in cols] for r in rows]


def _fit_width(cols: list[Column], body: list[list[str]], width: int) -> tuple[list[list[str]], list[str], int]:
    """Cut text columns (middle) until the table fits ``width``; drop trailing columns if
    it still does not. Returns the body, the headers shown, and how many columns were dropped."""
    headers = [c.header for c in cols]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]

    def total(column_widths):
        return sum(column_widths) + 2 * (len(column_widths) - 1)

    cuttable = [i for i, c in enumerate(cols) if not c.numeric and widths[i] > MIN_TEXT]
    while total(widths) > width and cuttable:
        i = max(cuttable, key=lambda j: widths[j])
        over = total(widths) - width
        widths[i] = max(MIN_TEXT, len(headers[i]), widths[i] - over)
        cuttable = [j for j in cuttable if widths[j] > max(MIN_TEXT, len(headers[j]))]
    for i, c in enumerate(cols):
        if not c.numeric:
            short = names.shorten_all((r[i] for r in body), widths[i])
            for r in body:
                r[i] = short[r[i]]
    dropped = 0
    keep = len(cols)
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]
    while keep > 1 and total(widths[:keep]) > width:
        keep -= 1
        dropped += 1
    return [r[:keep] for r in body], headers[:keep], dropped


def table_text(
    table: pa.Table,
    width: int | None = DEFAULT_WIDTH,
    rows: int | None = DEFAULT_ROWS,
    wide: bool = False,
    total: int | None = None,
) -> str:
    """``table`` as aligned text for a terminal (see the module doc); ``rows`` 0 or None: all.

    ``total``: the result's row count when ``table`` holds only its first rows (streamed output).
    """
    from rich import box
    from rich.console import Console
    from rich.table import Table

    total_rows = table.num_rows if total is None else total
    shown = table if not rows or total_rows <= rows else table.slice(0, rows)
    cols, body = cells(shown)
    hidden: list[str] = []
    headers = [c.header for c in cols]
    if not wide and width:
        body, headers, dropped = _fit_width(cols, body, width)
        hidden = [c.header for c in cols[len(cols) - dropped :]] if dropped else []
    drawn = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True, header_style="bold")
    for c, header in zip(cols, headers):
        drawn.add_column(header, justify="right" if c.numeric else "left", no_wrap=True)
    for r in body:
        drawn.add_row(*r)
    text = io.StringIO()
    console = Console(file=text, width=10_000, color_system=None, highlight=False)
    console.print(drawn)
    lines = [line.rstrip() for line in text.getvalue().splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if shown.num_rows < total_rows:
        lines.append(f"({shown.num_rows} of {total_rows:,} rows; {total_rows - shown.num_rows:,} more rows: --rows 0)")
    else:
        lines.append(f"({total_rows:,} row{'s' if total_rows != 1 else ''})")
    if hidden:
        note = f"({len(hidden)} more column{'s' if len(hidden) > 1 else ''} with --wide: {', '.join(hidden)}"
        lines.append((note if not width or len(note) < width else note[: width - 2] + "…") + ")")
    return "\n".join(lines) + "\n"
