"""The DuckDB file documents itself: COMMENT ON for every documented table, view and column."""

from pathlib import Path

import duckdb

import tracekit
from tracekit.schema import catalog

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_a100_synthetic" / "naive.json.gz"


def _comments(path):
    con = duckdb.connect(str(path), read_only=True)
    try:
        objects = dict(con.execute("SELECT table_name, comment FROM duckdb_tables() WHERE NOT internal").fetchall())
        objects |= dict(con.execute("SELECT view_name, comment FROM duckdb_views() WHERE NOT internal").fetchall())
        columns = {
            (t, c): doc
            for t, c, doc in con.execute(
                "SELECT table_name, column_name, comment FROM duckdb_columns() WHERE NOT internal"
            ).fetchall()
        }
    finally:
        con.close()
    return objects, columns


def test_loaded_then_linked_file_carries_the_schema_docs(tmp_path):
    db = tmp_path / "run.duckdb"
    with tracekit.load(SAMPLE, output=db):
        pass
    objects, columns = _comments(db)
    base = [n for n in catalog.TABLES if n in objects]
    assert "events" in base and "gpu_ops" not in objects  # linked on first use
    for name in base:
        assert objects[name] == catalog.TABLES[name].doc, name
    with tracekit.open(db, read_only=False) as trace:
        trace.link()
    objects, columns = _comments(db)
    assert "gpu_ops" in objects
    documented = 0
    for name, table in catalog.TABLES.items():
        assert objects.get(name) == table.doc, name
        for col in table.columns:
            assert columns[(name, col.name)] == col.doc, (name, col.name)
            documented += 1
    assert documented > 300
