"""The column constraints declared in schema.py hold on every shared trace and synthetic variant.

Perfetto-style: a column line may carry <unique not_null ref:table.column in:stages>;
this one generic test checks every declared constraint of every table the
database has, after linking, so a join that multiplies rows (a duplicated id)
or a dangling reference fails here whichever step introduced it.
"""

from __future__ import annotations

import pytest
from conftest import SHARED_TRACES

from tracekit.common.sqltext import in_list
from tracekit.schema import stages
from tracekit.schema.catalog import TABLES


def _violations(trace) -> list[str]:
    con = trace.con  # builds the linked model
    present = {
        r[0]
        for r in con.execute(
            "SELECT table_name FROM duckdb_tables() UNION SELECT view_name FROM duckdb_views()"
        ).fetchall()
    }
    out = []
    for table in TABLES.values():
        if table.name not in present:
            continue
        for col in table.columns:
            for check in col.checks:
                c, t = f'"{col.name}"', f'"{table.name}"'
                if check == "unique":
                    sql = f"SELECT count({c}) - count(DISTINCT {c}) FROM {t}"
                elif check == "not_null":
                    sql = f"SELECT count(*) FILTER (WHERE {c} IS NULL) FROM {t}"
                elif check.startswith("ref:"):
                    rt, rc = check[4:].split(".")
                    # A list column (annotation_ids): every element refers.
                    v = f"unnest({c})" if col.type.endswith("[]") else c
                    sql = f'SELECT count(*) FROM (SELECT {v} AS v FROM {t}) x WHERE x.v IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "{rt}" r WHERE r."{rc}" = x.v)'
                elif check == "in:stages":
                    sql = f"SELECT count(*) FROM {t} WHERE {c} NOT IN {in_list(stages.names())}"
                else:
                    raise AssertionError(f"unknown check {check!r} on {table.name}.{col.name}")
                bad = con.execute(sql).fetchall()[0][0]
                if bad:
                    out.append(f"{table.name}.{col.name} {check}: {bad} rows")
    return out


def test_every_declared_check_is_known():
    known = ("unique", "not_null", "in:stages")
    for table in TABLES.values():
        for col in table.columns:
            for check in col.checks:
                assert check in known or (check.startswith("ref:") and check[4:].split(".")[0] in TABLES), check


@pytest.mark.parametrize("rel", SHARED_TRACES)
def test_checks_hold_on_shared_traces(rel, load_shared):
    assert _violations(load_shared(rel)) == []


def test_checks_hold_on_the_synthetic_variants(post_traces):
    for name, (trace, _) in post_traces.items():
        assert _violations(trace) == [], name
