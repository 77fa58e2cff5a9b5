"""Every table, view and column of a loaded database is documented, with its type."""

from __future__ import annotations

import pytest
from synthetic import post_variants

import tracekit
from tracekit.schema.catalog import TABLES


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("schema") / "naive.json.gz"
    post_variants(["naive"])["naive"].write(path)
    with tracekit.load(path) as t:
        yield t


def test_every_table_is_documented_and_exists(trace):
    actual = {
        name
        for (name,) in trace.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
    }
    assert actual == set(TABLES)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_columns_match_the_docs(name, trace):
    actual = [(r[0], r[1]) for r in trace.con.execute(f'DESCRIBE "{name}"').fetchall()]
    documented = [(c.name, c.type) for c in TABLES[name].columns]
    assert actual == documented
    assert all(c.doc.strip() for c in TABLES[name].columns)
