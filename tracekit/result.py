"""``Result``: what every query of the Python API returns.

One type for ``Trace.sql``, ``Trace.query`` and ``diff.compare``: the rows as an Arrow
table, converted on request: ``.pl()`` (polars), ``.arrow()``, ``.df()`` (pandas, an
optional extra: ``pip install 'tracekit-attn[pandas]'``), ``.fetchall()`` (tuples),
``.to_dicts()``. In Jupyter it shows as a humanized table (units, the first rows);
``print(result)`` shows the same as text. Anything else is looked up on the polars
DataFrame (``result["name"]``, ``result.filter(...)``), or, for Arrow's own names
(``to_pylist``, ``num_rows``), on the Arrow table, so code written against either
return type keeps working.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    import pandas
    import polars
    import pyarrow as pa

PANDAS_HINT = "pip install 'tracekit-attn[pandas]' (or pip install pandas)"
REPR_ROWS = 20


class Result:
    """Rows of a query: ``.pl()``, ``.arrow()``, ``.df()``, ``.fetchall()``, ``.to_dicts()``."""

    __slots__ = ("_table", "_pl", "name")

    def __init__(self, table: pa.Table, name: str | None = None):
        self._table = table
        self._pl: polars.DataFrame | None = None
        self.name = name  # the query's id, or None for SQL

    def arrow(self) -> pa.Table:
        """The rows as a pyarrow Table (no copy)."""
        return self._table

    def pl(self) -> polars.DataFrame:
        """The rows as a polars DataFrame."""
        if self._pl is None:
            import polars

            self._pl = polars.from_arrow(self._table)  # type: ignore[assignment]
        assert self._pl is not None
        return self._pl

    def df(self) -> pandas.DataFrame:
        """The rows as a pandas DataFrame (pandas is an optional extra)."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise TracekitError(f"Result.df() needs pandas, which is not installed: {PANDAS_HINT}") from None
        return self._table.to_pandas()

    to_pandas = df

    def fetchall(self) -> list[tuple]:
        """The rows as tuples, like a DB-API cursor."""
        cols = [c.to_pylist() for c in self._table.columns]
        return list(zip(*cols)) if cols else []

    def to_dicts(self) -> list[dict]:
        """The rows as dicts."""
        return self._table.to_pylist()

    @property
    def columns(self) -> list[str]:
        return self._table.column_names

    def __len__(self) -> int:
        return self._table.num_rows

    def __getitem__(self, key):
        return self.pl()[key]

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):
            raise AttributeError(attr)
        if hasattr(self._table, attr) and attr not in ("to_pandas", "columns", "filter", "sort_by", "select"):
            return getattr(self._table, attr)  # Arrow's own names (to_pylist, num_rows, column_names)
        return getattr(self.pl(), attr)

    def __repr__(self) -> str:
        from tracekit.present import humanize

        title = f"<tracekit.Result {self.name or 'SQL'}: {len(self):,} rows>\n"
        return title + humanize.table_text(self._table, rows=REPR_ROWS)

    def _repr_html_(self) -> str:
        from tracekit.present import humanize

        shown = self._table.slice(0, REPR_ROWS)
        cols, body = humanize.cells(shown)
        head = "".join(f"<th>{escape(c.header)}</th>" for c in cols)
        rows = "".join(
            "<tr>"
            + "".join(
                f'<td style="text-align:{"right" if c.numeric else "left"}">{escape(v)}</td>' for c, v in zip(cols, r)
            )
            + "</tr>"
            for r in body
        )
        more = f"{len(self):,} rows" + (f", first {REPR_ROWS} shown (.pl() for all)" if len(self) > REPR_ROWS else "")
        caption = f"{escape(self.name or 'SQL')}: {more}; times in the unit of the header, raw values in .pl()"
        return (
            f'<div style="overflow-x:auto"><table><caption style="text-align:left">{caption}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>"
        )
