"""Rendering result rows: one registry (``WRITERS``) of every format the CLI offers."""

from __future__ import annotations

import csv
import datetime
import decimal
import io
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: `tracekit load` never needs Arrow
    import pyarrow as pa


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
    count, num; short demangles a kernel name and cuts it in the middle to 60 characters."""
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
    if unit == "short":  # a kernel name: demangled, cut in the middle to 60 characters
        from . import names

        return names.shorten(names.readable(str(value)), 60)
    return str(value)


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


def _write_table(table: pa.Table, out, style: dict) -> None:
    from . import humanize

    out.write(humanize.table_text(table, **style))


def _write_csv(table: pa.Table, out, style: dict) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in table.to_pylist():
        writer.writerow([_cell(v, exact=True) for v in row.values()])


def _write_json(table: pa.Table, out, style: dict) -> None:
    json.dump(records(table), out, indent=1)
    out.write("\n")


def _write_ndjson(table: pa.Table, out, style: dict) -> None:
    for r in table.to_pylist():
        out.write(json.dumps(_plain(r)) + "\n")


def _write_parquet(table: pa.Table, out, style: dict) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, out)


# The output formats, one writer each: (write(table, stream, style), binary). `table` is for people
# (tracekit.humanize: units, widths, row limit); the others keep every value exact.
WRITERS: dict[str, tuple[Callable[[pa.Table, Any, dict], None], bool]] = {
    "table": (_write_table, False),
    "csv": (_write_csv, False),
    "json": (_write_json, False),
    "ndjson": (_write_ndjson, False),
    "parquet": (_write_parquet, True),
}
FORMATS = tuple(WRITERS)


def is_stdout(path) -> bool:
    """``-`` as an output path: standard output."""
    return path is not None and str(path) == "-"


def render(table: pa.Table, fmt: str, out=None, path: Path | None = None, **style) -> None:
    """Write ``table`` as ``fmt`` to ``path`` if given (``-``: standard output), else to the
    text stream ``out``. ``style`` goes to the table format (width, rows, wide)."""
    if fmt not in WRITERS:
        raise ValueError(f"unknown format {fmt!r}")
    write, binary = WRITERS[fmt]
    if fmt != "table":
        style = {}
    if is_stdout(path):
        path, out = None, sys.stdout
    if binary:
        if path is None:
            stream = getattr(out, "buffer", None)
            if stream is None or (hasattr(out, "isatty") and out.isatty()):
                raise ValueError(f"{fmt} output is binary: give -o FILE (or -o - into a pipe)")
            out.flush()
            write(table, stream, style)
            stream.flush()
            return
        write(table, str(path), style)
        return
    buf = io.StringIO()
    write(table, buf, style)
    text = buf.getvalue()
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    else:
        out.write(text)
