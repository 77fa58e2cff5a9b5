"""Rendering result rows: one registry (``WRITERS``) of every format the CLI offers."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.common import outputs
from tracekit.present.values import cell, plain

if TYPE_CHECKING:  # imported where used: `tracekit load` never needs Arrow
    import pyarrow as pa


# Characters a terminal acts on (escape sequences, carriage returns): shown escaped in table cells.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROL_RE = "[" + "".join(f"\\x{{{c:02x}}}" for c in _CONTROL) + "]"  # the same, as an RE2 class
# Rows per Arrow batch, read from DuckDB (api) and rendered (here).
BATCH_ROWS = 10_000


def _batches(data) -> Iterator:
    """Record batches of an Arrow table or a RecordBatchReader (at most BATCH_ROWS rows each)."""
    import pyarrow as pa

    if isinstance(data, pa.Table):
        yield from data.to_batches(max_chunksize=BATCH_ROWS)
    else:
        for batch in data:
            for start in range(0, batch.num_rows, BATCH_ROWS):
                yield batch.slice(start, BATCH_ROWS)


def _tuples(batch) -> Iterator[tuple]:
    """Rows of a batch as tuples (duplicate column names keep every column)."""
    return zip(*(c.to_pylist() for c in batch.columns))


def _escaped(table: pa.Table) -> pa.Table:
    """``table`` with control characters in its text columns shown as ``\\x1b``: a kernel name
    cannot send escape sequences to the terminal."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for column in table.columns:
        if (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)) and pc.any(
            pc.match_substring_regex(column, _CONTROL_RE)
        ).as_py():
            # Only a column that holds one is rebuilt: pa.array of a Python list imports pandas, which
            # would cost every table its import.
            column = pa.array([v if v is None else v.translate(_CONTROL) for v in column.to_pylist()], column.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)


def _write_table(data, out, style: dict) -> None:
    """Widths fitted on the first rows, then every row streamed: memory stays flat (``humanize.write``)."""
    import pyarrow as pa

    from tracekit.present import humanize

    escaped = (_escaped(pa.Table.from_batches([b])).to_batches()[0] if b.num_rows else b for b in _batches(data))
    humanize.write(escaped, data.schema, out, **style)


def _write_csv(data, out, style: dict) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(data.schema.names)
    for batch in _batches(data):
        for row in _tuples(batch):
            writer.writerow([cell(v, exact=True) for v in row])


def _write_json(data, out, style: dict) -> None:
    first = True
    for batch in _batches(data):
        for r in batch.to_pylist():
            text = json.dumps(plain(r), indent=1).replace("\n", "\n ")
            out.write(("[\n " if first else ",\n ") + text)
            first = False
    out.write("[]\n" if first else "\n]\n")


def _write_ndjson(data, out, style: dict) -> None:
    for batch in _batches(data):
        for r in batch.to_pylist():
            out.write(json.dumps(plain(r)) + "\n")


def _write_parquet(data, out, style: dict) -> None:
    import pyarrow.parquet as pq

    with pq.ParquetWriter(out, data.schema) as writer:
        for batch in _batches(data):
            writer.write_batch(batch)


# The output formats, one writer each: (write(rows, stream, style), binary); rows are an Arrow table
# or a RecordBatchReader, written batch by batch. `table` is for people (tracekit.humanize: units,
# widths, row limit); the others keep every value exact.
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


def render(data, fmt: str, out=None, path: Path | None = None, inputs=(), **style) -> None:
    """Write ``data`` (an Arrow table or RecordBatchReader) as ``fmt`` to ``path`` if given (``-``:
    standard output), else to the text stream ``out``. ``style`` goes to the table format (width,
    rows, wide).

    Rows are written batch by batch, so memory does not grow with the result. A file is written
    atomically (``tracekit.outputs``): on any error the previous file is left as it was, and
    ``inputs`` (the command's) are refused as targets.
    """
    if fmt not in WRITERS:
        raise ValueError(f"unknown format {fmt!r}")
    write, binary = WRITERS[fmt]
    if fmt != "table":
        style = {}
    if is_stdout(path):
        path, out = None, sys.stdout
    if path is not None:
        if binary:
            outputs.write(path, lambda fh: write(data, fh, style), inputs)
            return

        def to_file(fh) -> None:
            text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
            write(data, text, style)
            text.flush()
            text.detach()

        outputs.write(path, to_file, inputs)
        return
    if binary:
        stream = getattr(out, "buffer", None)
        if stream is None or (hasattr(out, "isatty") and out.isatty()):
            raise ValueError(f"{fmt} output is binary: give -o FILE (or -o - into a pipe)")
        out.flush()
        write(data, stream, style)
        stream.flush()
        return
    write(data, out, style)
