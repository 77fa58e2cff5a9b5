"""Rows for people: the ``table`` format of every command (and the HTML evidence tables).

A column's unit comes from its name: ``*_ns`` (or ``_ns_`` inside: ``delta_ns_per_call``)
is a duration in nanoseconds, shown in µs, ms or s, one unit for every duration column of a
table (no ``gpu_µs`` beside ``cpu_ms``), chosen from the durations' 90th percentile so that one
outlier does not round the rest to zero, and written into the header: ``gpu_ns`` -> ``gpu_µs``; ``*_pct`` is a percentage; ``*_bytes`` a size
(KB, MB or GB, named in the header); ``ratio`` a factor (``0.51x``); other numbers get
thousands separators (ids do not). Mangled kernel names are demangled.

The table fits ``width`` columns (``wide``: no limit) by a policy that keeps what identifies
a row (``fit``): mostly-zero ``*_by_*`` columns, then provenance and derived columns, go
first; other text is shortened; names (trace, module, op, kernel, stage) are the last to
shrink, and a C++ kernel name shortens by eliding its parameters, namespaces and template
arguments (``names.shorten``). What is left out is named in a last line.

Output streams: widths and units are fitted on the first ``SAMPLE_ROWS`` rows, then every
row is written as it comes, so time is linear in the rows and memory does not grow with
them (``write``). The table shows ``rows`` rows with a line saying how many more there are.
csv, json, ndjson and parquet keep the raw values.
"""

from __future__ import annotations

import decimal
import itertools
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.common import names
from tracekit.present.values import duration_number, plain, time_unit

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_WIDTH = 100
DEFAULT_ROWS = 40
MIN_TEXT = 16  # a text column is never cut below this many characters (stage names stay whole)
MIN_NAME = 24  # a name column keeps this many before any other column is dropped
SAMPLE_ROWS = 2_000  # rows the widths and units are fitted on; the rest stream through
GAP = "  "
RULE = "─"


def preload() -> None:
    """Kept for callers that warmed the table's drawing code: the table is drawn here now, so there is
    nothing to import ahead."""


_UNIT_GAP = re.compile(r"(?<=\d) (?=(?:%|ns|µs|ms|s|x|GB|MB|KB)(?:\W|$))")


def prose(text: str, width: int, first: str = "", rest: str = "    ") -> list[str]:
    """``text`` wrapped at word boundaries to ``width`` with a hanging indent: ``first`` before its first
    line, ``rest`` before the others. A number keeps its unit (``23.9 %``) and a word longer than a line
    (a path, a kernel name) stays whole."""
    import textwrap

    glued = _UNIT_GAP.sub("\0", text.strip())
    lines = textwrap.wrap(
        glued, width=width, initial_indent=first, subsequent_indent=rest, break_long_words=False, break_on_hyphens=False
    )
    return [line.replace("\0", " ") for line in lines] or [first.rstrip()]


def terminal_width(stream=None) -> int:
    """Columns a table fits: the terminal's width; into a pipe or file, ``$COLUMNS`` when it is a number
    (a caller sizing the output), else ``DEFAULT_WIDTH``."""
    import os
    import shutil

    if stream is not None and getattr(stream, "isatty", lambda: False)():
        return shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns or DEFAULT_WIDTH
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) >= 20 else DEFAULT_WIDTH


_NS_COLUMN = re.compile(r"(^|_)ns($|_)")
_ID_COLUMN = re.compile(r"(^|_)(id|ids|pid|tid|correlation|rank|step|order|version|year)$")
_BYTES_COLUMN = re.compile(r"(^|_)(bytes)($|_)")
_BYTE_UNITS = (("B", 1, 1e4), ("KB", 1e3, 1e7), ("MB", 1e6, 1e10), ("GB", 1e9, math.inf))
_TIMESTAMP = re.compile(r"(^|_)(ts|end|start)_ns$")
# What identifies a row: the last columns to shrink, never dropped while another column can go.
_NAME_COLUMNS = {"trace", "module", "op", "kernel", "name", "stage", "region", "label", "impl", "module_class"}
_NAME_SUFFIXES = ("_name", "_label", "_module", "_kernel", "_op", "_trace")
# Where a value came from (the evidence, the rule, the file): the first to go.
_PROVENANCE = {"source", "path", "file", "files", "rule", "rules", "decided_by", "evidence", "how", "origin"}
_PROVENANCE_RE = re.compile(r"(^|_)(source|path|file|rule|decided_by|evidence|provenance)$")
# Figures derived from others in the row (a rate, a mean per occurrence).
_DERIVED_RE = re.compile(r"(_per_occurrence$|_per_s$|tflops|_per_byte$|^tb_|_tbps$)")
# Counts of ops beside their time: dropped before the times.
_COUNT_RE = re.compile(r"(^|_)gpu_ops($|_)")
# What a comparison is about: kept longest among the numbers.
_KEY_RE = re.compile(r"(^delta|^ratio$|_ratio$|^change$|^share_pct$)")


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


def is_timestamp(name: str) -> bool:
    """A point in time (``ts_ns``, ``start_ns``, ``end_ns``: epoch-scale ns), not a duration."""
    return bool(_TIMESTAMP.search(name))


def _largest(values: Iterable) -> float:
    return max((abs(float(v)) for v in values if v is not None), default=0.0)


def column(name: str, arrow_type, values: list, largest_ns: float | None = None) -> Column:
    """The display rule for column ``name`` of ``arrow_type`` holding ``values``; ``largest_ns``: the
    duration that picks the unit (default: the largest of ``values``)."""
    import pyarrow as pa

    numeric = pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type)
    if not numeric:
        kind = "text" if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) else "other"
        return Column(name, name, kind)
    if _TIMESTAMP.search(name):  # a point in time (epoch-scale ns), not a duration: exact
        return Column(name, name, "id", numeric=True)
    if _NS_COLUMN.search(name):
        unit, scale = time_unit(_largest(values) if largest_ns is None else largest_ns)
        return Column(
            name, _NS_COLUMN.sub(lambda m: f"{m.group(1)}{unit}{m.group(2)}", name, count=1), "time", scale, True
        )
    if _BYTES_COLUMN.search(name) and not name.endswith("_per_byte"):
        biggest = _largest(values)
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
    """The display rule of each column; the duration columns share one unit (``time_scale``)."""
    data = {i: table.column(i).to_pylist() for i in range(table.num_columns)}
    durations = [i for i, f in enumerate(table.schema) if _NS_COLUMN.search(f.name) and not _TIMESTAMP.search(f.name)]
    typical = time_scale([v for i in durations for v in data[i]])
    return [column(f.name, f.type, data[i], typical if i in durations else None) for i, f in enumerate(table.schema)]


def time_scale(values: list) -> float:
    """The duration that picks a table's time unit: the 90th percentile of its durations' sizes."""
    sizes = sorted(abs(float(v)) for v in values if isinstance(v, (int, float, decimal.Decimal)) and v is not None)
    sizes = [v for v in sizes if math.isfinite(v)]
    return sizes[min(len(sizes) - 1, int(0.9 * len(sizes)))] if sizes else 0.0


def cells(table: pa.Table) -> tuple[list[Column], list[list[str]]]:
    """Display rules and display text of every row (nothing cut)."""
    cols = columns(table)
    return cols, [[c.text(v) for c, v in zip(cols, row)] for row in _tuples(table)]


def _tuples(table) -> Iterator[tuple]:
    return zip(*(c.to_pylist() for c in table.columns))


def text_width(text: str) -> int:
    """Terminal cells ``text`` takes (East Asian wide characters take two, combining marks none)."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def is_name(col: Column) -> bool:
    """A column that identifies a row: a trace, module, op, kernel or stage name."""
    return not col.numeric and (col.name in _NAME_COLUMNS or col.name.endswith(_NAME_SUFFIXES))


def _priority(col: Column, values: list) -> int:
    """Which columns go first when a table is too wide: lowest first (0: a mostly-zero ``*_by_*``
    column, 1: provenance (the other ``*_by_*`` columns too), 2: derived, 3: op counts, 4: the rest,
    5: what a comparison is about)."""
    name = col.name
    if "_by_" in name and col.numeric:  # how a figure was decided (gpu_by_label, gpu_by_kernel): provenance
        zero = sum(1 for v in values if not v)
        return 0 if zero >= 0.8 * len(values) else 1
    if name in _PROVENANCE or _PROVENANCE_RE.search(name):
        return 1
    if _DERIVED_RE.search(name):
        return 2
    if _COUNT_RE.search(name):
        return 3
    if _KEY_RE.search(name):
        return 5
    return 4


@dataclass
class Layout:
    """A fitted table: the columns shown, their widths, what was left out, how text is cut."""

    cols: list[Column]
    shown: list[int]
    widths: dict[int, int]
    hidden: list[str]
    cut: dict[int, dict[str, str]]  # per text column shown narrower than its text: {text: shown}

    def cell(self, i: int, value) -> str:
        text = self.cols[i].text(value)
        width = self.widths[i]
        if self.cols[i].numeric or len(text) <= width:
            return text
        known = self.cut[i]
        short = known.get(text)
        if short is None:
            short = names.shorten(text, width)
            if len(known) < 4 * SAMPLE_ROWS:
                known[text] = short
        return short

    def line(self, texts: list[str]) -> str:
        parts = []
        for i, text in zip(self.shown, texts):
            width = self.widths[i]
            if not text.isascii():
                width += len(text) - text_width(text)
            parts.append(text.rjust(width) if self.cols[i].numeric else text.ljust(width))
        return GAP.join(parts).rstrip()

    def row(self, values: tuple) -> str:
        return self.line([self.cell(i, values[i]) for i in self.shown])

    def head(self) -> list[str]:
        header = self.line([self.cols[i].header for i in self.shown])
        total = sum(self.widths[i] for i in self.shown) + len(GAP) * (len(self.shown) - 1)
        return [header, RULE * max(total, 0)] if self.shown else []


def fit(sample: pa.Table, width: int | None, wide: bool = False) -> Layout:
    """The layout of a table whose first rows are ``sample``, within ``width`` columns (``wide`` or no
    width: every column, nothing cut)."""
    cols = columns(sample)
    values = [c.to_pylist() for c in sample.columns]
    texts = [[c.text(v) for v in values[i]] for i, c in enumerate(cols)]
    natural = {i: max([text_width(c.header), *map(text_width, texts[i])]) for i, c in enumerate(cols)}
    shown = list(range(len(cols)))
    widths = dict(natural)
    layout = Layout(cols, shown, widths, [], {i: {} for i in shown})
    if wide or not width:
        return layout

    def total() -> int:
        return sum(widths[i] for i in shown) + len(GAP) * (len(shown) - 1)

    def floor(i: int, least: int) -> int:
        return min(natural[i], max(least, text_width(cols[i].header)))

    def shrink(which: list[int], least: int) -> None:
        """Narrow the widest of ``which`` first, none below ``least`` (or its header)."""
        while total() > width:
            can = [i for i in which if i in shown and widths[i] > floor(i, least)]
            if not can:
                return
            i = max(can, key=lambda j: (widths[j], -j))
            others = sorted((widths[j] for j in can if j != i), reverse=True)
            target = max(floor(i, least), widths[i] - (total() - width), others[0] if others else 0)
            widths[i] = target if target < widths[i] else widths[i] - 1

    def drop(upto: int) -> None:
        """Drop columns of priority ``upto`` or lower, lowest first, rightmost first, never the first."""
        order = sorted((i for i in shown[1:] if not is_name(cols[i]) and prio[i] <= upto), key=lambda i: (prio[i], -i))
        for i in order:
            if total() <= width:
                return
            shown.remove(i)

    prio = {i: _priority(c, values[i]) for i, c in enumerate(cols)}
    name_cols = [i for i, c in enumerate(cols) if is_name(c)]
    other_text = [i for i, c in enumerate(cols) if not c.numeric and i not in name_cols]
    drop(0)  # mostly-zero *_by_* columns
    shrink(other_text, MIN_TEXT)
    drop(3)  # provenance, derived, op counts
    shrink(name_cols, MIN_NAME)
    drop(5)  # the rest, the comparison's own figures last
    shrink(name_cols + other_text, MIN_TEXT)
    while total() > width and len(shown) > 1:  # the names themselves, from the right
        shown.pop()
    for group in (name_cols, other_text):  # room a dropped column left: back to the names first
        for i in sorted((i for i in group if i in shown), key=lambda i: natural[i] - widths[i]):
            widths[i] = min(natural[i], widths[i] + max(0, width - total()))
    layout.hidden = [cols[i].header for i in range(len(cols)) if i not in shown]
    for i in shown:
        if not cols[i].numeric and widths[i] < natural[i]:
            layout.cut[i] = names.shorten_all((t for t in texts[i] if len(t) > widths[i]), widths[i])
            widths[i] = max([text_width(cols[i].header), *(text_width(layout.cut[i].get(t, t)) for t in texts[i])])
    return layout


def _footer(layout: Layout, shown: int, total: int, width: int | None) -> list[str]:
    lines = []
    if shown < total:
        lines.append(f"({shown} of {total:,} rows; {total - shown:,} more rows: --rows 0)")
    else:
        lines.append(f"({total:,} row{'s' if total != 1 else ''})")
    hidden = layout.hidden
    if hidden:
        note = f"({len(hidden)} more column{'s' if len(hidden) > 1 else ''} with --wide: {', '.join(hidden)}"
        lines.append((note if not width or len(note) < width else note[: width - 2] + "…") + ")")
    return lines


def write(
    batches: Iterable,
    schema: pa.Schema,
    out,
    width: int | None = DEFAULT_WIDTH,
    rows: int | None = DEFAULT_ROWS,
    wide: bool = False,
) -> None:
    """Write record ``batches`` of ``schema`` to the text stream ``out`` as a table (see the module doc):
    the layout is fitted on the first ``SAMPLE_ROWS`` rows (or the ``rows`` shown, if fewer), then each
    row is written as it comes and the rest only counted. Linear time, memory bounded by the sample."""
    import pyarrow as pa

    limit = rows or 0
    want = min(limit, SAMPLE_ROWS) if limit else SAMPLE_ROWS
    sample: list = []
    rest: list = []
    taken = total = 0
    it = iter(batches)
    for batch in it:
        total += batch.num_rows
        take = min(batch.num_rows, want - taken)
        if take:
            sample.append(batch.slice(0, take))
            taken += take
        if take < batch.num_rows:
            rest.append(batch.slice(take))
        if taken >= want:
            break
    table = pa.Table.from_batches(sample, schema=schema)
    layout = fit(table, width, wide)
    for line in layout.head():
        out.write(line + "\n")
    written = 0
    for row in _tuples(table):
        out.write(layout.row(row) + "\n")
        written += 1
    del table, sample
    for batch, counted in itertools.chain(((b, True) for b in rest), ((b, False) for b in it)):
        if not counted:
            total += batch.num_rows
        if limit and written >= limit:
            continue
        part = batch if not limit else batch.slice(0, limit - written)
        for row in _tuples(part):
            out.write(layout.row(row) + "\n")
        written += part.num_rows
    out.write("\n".join(_footer(layout, written, total, width)) + "\n")


def table_text(
    table: pa.Table,
    width: int | None = DEFAULT_WIDTH,
    rows: int | None = DEFAULT_ROWS,
    wide: bool = False,
) -> str:
    """``table`` as aligned text for a terminal (see the module doc); ``rows`` 0 or None: all."""
    import io

    text = io.StringIO()
    write(table.to_batches(), table.schema, text, width=width, rows=rows, wide=wide)
    return text.getvalue()
