"""Rendering result rows: one function writes every format the CLI offers."""

from __future__ import annotations

import csv
import datetime
import decimal
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: `tracekit load` never needs Arrow
    import pyarrow as pa

FORMATS = ("table", "csv", "json", "ndjson", "parquet")


def _plain(value):
    """A JSON-friendly Python value."""
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time, datetime.timedelta)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


UNITS = ("ns", "us", "ms", "pct", "x", "count", "num", "short")


def format_unit(value, unit: str, missing: str = "–") -> str:
    """Display text of a number in a unit: ns (µs, or ms from 10 ms up), us, ms, pct, x,
    count, num; short truncates long text (kernel names) to 60 characters."""
    if value is None:
        return missing
    if unit == "ns":
        unit = "us" if abs(value) < 1e7 else "ms"
    if unit == "us":
        return f"{value / 1e3:,.1f} µs"
    if unit == "ms":
        return f"{value / 1e6:,.3f} ms"
    if unit == "pct":
        return f"{value:.1f} %"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "count":
        return f"{value:,}"
    if unit == "num":
        return f"{value:,.1f}" if value != int(value) else f"{int(value):,}"
    text = str(value)
    return text[:59] + "…" if unit == "short" and len(text) > 60 else text


def records(table: pa.Table) -> list[dict]:
    """Rows as JSON-friendly dicts."""
    return [_plain(r) for r in table.to_pylist()]


def _cell(value, exact: bool = False) -> str:
    """Text of one value in table (rounded floats) and CSV (exact) output."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if exact or not math.isfinite(value) or abs(value) >= 1e15:
            return repr(value)
        return f"{value:.3f}".rstrip("0").rstrip(".")
    if isinstance(value, (list, dict)):
        return json.dumps(_plain(value), separators=(",", ":"))
    return str(_plain(value))


def _table(table: pa.Table, max_width: int) -> str:
    names = table.column_names
    rows = table.to_pylist()
    import pyarrow as pa

    numeric = [pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) for t in table.schema.types]
    cells = [[_cell(r[n]) for n in names] for r in rows]
    if max_width > 0:
        cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in row] for row in cells]
    widths = [max([len(n), *(len(row[i]) for row in cells)]) for i, n in enumerate(names)]

    def line(values):
        out = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(out).rstrip()

    lines = [line(names), "  ".join("-" * w for w in widths)]
    lines += [line(row) for row in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"


def render(table: pa.Table, fmt: str, out=None, path: Path | None = None, max_width: int = 80) -> None:
    """Write ``table`` as ``fmt`` to ``path`` if given, else to the text stream ``out``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}")
    if fmt == "parquet":
        if path is None:
            raise ValueError("parquet output needs --output FILE")
        import pyarrow.parquet as pq

        pq.write_table(table, str(path))
        return
    buf = io.StringIO()
    if fmt == "table":
        buf.write(_table(table, max_width))
    elif fmt == "csv":
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(table.column_names)
        for row in table.to_pylist():
            writer.writerow([_cell(v, exact=True) for v in row.values()])
    elif fmt == "json":
        json.dump(records(table), buf, indent=1)
        buf.write("\n")
    else:
        for r in table.to_pylist():
            buf.write(json.dumps(_plain(r)) + "\n")
    text = buf.getvalue()
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    else:
        out.write(text)
