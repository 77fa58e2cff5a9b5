"""Values for people and for JSON: the one place that turns a result's values into text.

``plain`` makes a value JSON-friendly; ``cell`` is its text in a table or CSV cell; ``format_unit`` is
the display of a number in a unit (durations, percentages, ratios, counts) wherever prose or a report
shows one.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


def plain(value):
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
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


UNITS = ("ns", "us", "ms", "pct", "x", "count", "num", "short")

# How a duration in ns is shown: (unit, ns per unit, below how many ns this unit is chosen). The one place
# durations get their units: ``format_unit`` per value, the table format (``humanize``) per column.
TIME_UNITS = (("µs", 1e3, 1e7), ("ms", 1e6, 1e10), ("s", 1e9, math.inf))


def time_unit(largest_ns: float) -> tuple[str, float]:
    """The unit (and ns per unit) a duration of ``largest_ns`` is shown in: µs below 10 ms, ms below 10 s, else s."""
    return next((unit, scale) for unit, scale, below in TIME_UNITS if abs(largest_ns) < below)


def duration_number(ns: float, scale: float) -> str:
    """The number of a duration shown in the unit of ``scale`` ns: µs with one decimal, ms and s with three."""
    return f"{ns / scale:,.1f}" if scale == 1e3 else f"{ns / scale:,.3f}"


def format_ns_as(value, largest_ns: float | None, missing: str = "–") -> str:
    """A duration in the unit ``largest_ns`` is shown in: the figures of one column (a trace's breakdown) share
    one unit (no µs beside ms)."""
    if value is None:
        return missing
    name, scale = time_unit(largest_ns if largest_ns is not None else value)
    return f"{duration_number(value, scale)} {name}"


def format_unit(value, unit: str, missing: str = "–") -> str:
    """Display text of a number in a unit: ns (µs; ms from 10 ms up; s from 10 s up), us, ms, pct, x,
    count, num; short demangles a kernel name and shortens it to 60 characters (names.shorten)."""
    if value is None:
        return missing
    if unit in ("ns", "us", "ms"):
        name, scale = time_unit(value) if unit == "ns" else ("µs", 1e3) if unit == "us" else ("ms", 1e6)
        return f"{duration_number(value, scale)} {name}"
    if unit == "pct":
        return f"{value:.1f} %"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "count":
        return f"{value:,}"
    if unit == "num":
        return f"{value:,.1f}" if value != int(value) else f"{int(value):,}"
    if unit == "short":  # a kernel name: demangled, templates and namespaces elided to 60 characters
        from tracekit.common import names

        return names.shorten(names.readable(str(value)), 60)
    return str(value)


def records(table: pa.Table) -> list[dict]:
    """Rows as JSON-friendly dicts."""
    return [plain(r) for r in table.to_pylist()]


def cell(value, exact: bool = False) -> str:
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
        return json.dumps(plain(value), separators=(",", ":"))
    return str(plain(value))
