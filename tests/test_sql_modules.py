"""The model's SQL modules (tracekit/<package>/sql/*.sql) and the step runner that runs them.

Every build the tests run checks each module's header against what it did (conftest turns
``sqlmodules.CHECK`` on): a module that leaves a table it does not declare, or declares one it does not
leave, fails that test. Here: the headers themselves, the runner's checks, and steps run alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tracekit.common import sqlmodules
from tracekit.model.link import BLEED_NS
from tracekit.schema.kinds import CPU_NEST_KINDS, LAUNCH_KINDS

CONTAINER_KINDS = tuple(k for k in CPU_NEST_KINDS if k not in LAUNCH_KINDS)

ROOT = Path(__file__).resolve().parent.parent
MODULES = sqlmodules.every_module()


def test_there_are_modules_and_each_is_documented():
    assert len(MODULES) >= 10
    for m in MODULES:
        assert m.summary.endswith("."), f"{m.path}: the header opens with a sentence that says what it is"
        assert m.fragment or m.creates, f"{m.path}: a step declares what it creates (@creates)"
        for p in m.params.values():
            assert p.doc, f"{m.path}:{p.line}: parameter {p.name} has no doc"
        for name, doc in {**m.creates, **m.scratch}.items():
            assert name.startswith("_") and doc or not name.startswith("_"), (
                f"{m.path}: private table {name} has no doc"
            )


def test_every_private_table_is_listed_in_the_architecture_doc():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert [t for t in sqlmodules.private_tables() if f"`{t}`" not in doc] == []


def _module(tmp_path, text: str) -> sqlmodules.Module:
    path = tmp_path / "m.sql"
    path.write_text(text)
    return sqlmodules.parse(path, "model/m")


def test_a_parameter_used_and_not_declared_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"m\.sql: \{\{n\}\} is used and not declared"):
        _module(tmp_path, "-- Title.\n-- @creates t  doc\nCREATE TABLE t AS SELECT {{n}};\n")


def test_a_parameter_declared_and_not_used_names_its_line(tmp_path):
    with pytest.raises(ValueError, match=r"m\.sql:2: parameter n is declared and not used"):
        _module(tmp_path, "-- Title.\n-- @param n INT  a number\n-- @creates t  doc\nCREATE TABLE t AS SELECT 1;\n")


def test_an_unknown_header_line_is_an_error(tmp_path):
    with pytest.raises(ValueError, match=r"m\.sql:2: unknown header line"):
        _module(tmp_path, "-- Title.\n-- @create t  doc\nCREATE TABLE t AS SELECT 1;\n")


def test_calls_must_give_exactly_the_declared_parameters_of_the_declared_types(tmp_path):
    m = _module(
        tmp_path,
        "-- Title.\n-- @param n INT  a number\n-- @param k KEYWORD(TABLE|TEMP TABLE)  kind\n-- @param names LIST  names\n"
        "-- @creates t  doc\nCREATE {{k}} t AS SELECT {{n}} AS n WHERE 'a' IN {{names}};\n",
    )
    assert m.render({"n": 3, "k": "TEMP TABLE", "names": ["a", "it's"]}) == [
        "CREATE TEMP TABLE t AS SELECT 3 AS n WHERE 'a' IN ('a', 'it''s')"
    ]
    with pytest.raises(ValueError, match=r"missing names"):
        m.render({"n": 3, "k": "TABLE"})
    with pytest.raises(ValueError, match=r"not declared: x"):
        m.render({"n": 3, "k": "TABLE", "names": ["a"], "x": 1})
    with pytest.raises(ValueError, match=r"m\.sql:2: parameter n must be an int"):
        m.render({"n": "3; DROP TABLE x", "k": "TABLE", "names": ["a"]})
    with pytest.raises(ValueError, match=r"parameter k must be one of TABLE, TEMP TABLE"):
        m.render({"n": 3, "k": "VIEW", "names": ["a"]})


def test_the_check_catches_a_module_that_leaves_what_it_does_not_declare(tmp_path, monkeypatch):
    m = _module(
        tmp_path,
        "-- Title.\n-- @creates _t  doc\nCREATE TEMP TABLE _t AS SELECT 1;\nCREATE TEMP TABLE _u AS SELECT 1;\n",
    )
    monkeypatch.setattr(sqlmodules, "module", lambda name: m)
    monkeypatch.setattr(sqlmodules, "CHECK", True)
    with pytest.raises(AssertionError, match=r"left \['_u'\] it does not declare"):
        sqlmodules.run(duckdb.connect(), "model/m")


def _base_tables(tmp_path) -> duckdb.DuckDBPyConnection:
    """The base tables of a synthetic trace (truth by construction): on thread 1, an annotation holding an op
    holding a runtime call; a second op alone on thread 2."""
    import tracekit

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "attention", "pid": 1, "tid": 1, "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 110.0, "dur": 20.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 115.0, "dur": 5.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 2, "ts": 105.0, "dur": 10.0},
    ]
    path = tmp_path / "nest_truth.json"
    path.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "nest_truth.duckdb"
    tracekit.load([path], output=out).close()
    return duckdb.connect(str(out))


def test_the_axis_step_runs_alone_on_a_small_database(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlmodules, "CHECK", True)
    con = _base_tables(tmp_path)
    ((lanes, span),) = sqlmodules.fetch(con, "model/axis_lanes", kinds=CPU_NEST_KINDS)
    assert (lanes, span) == (2, 50_000)
    sqlmodules.run(con, "model/axis", kinds=CPU_NEST_KINDS, spread=1 << 20)
    rows = con.execute("SELECT name, lane, k0, k1, pos FROM _cpu ORDER BY pos").fetchall()
    by_lane = {name: lane for name, lane, *_ in rows}
    assert by_lane["attention"] == by_lane["aten::mm"] == by_lane["cudaLaunchKernel"] != by_lane["aten::add"]
    # Positions follow the axis: lane by lane, by start; keys are the lane's offset plus ns since the trace began.
    assert [r[0] for r in rows if r[1] == by_lane["attention"]] == ["attention", "aten::mm", "cudaLaunchKernel"]
    first = {name: (k0, k1) for name, lane, k0, k1, _ in rows}
    assert first["aten::mm"][0] - first["attention"][0] == 10_000
    assert sqlmodules.private_tables() and {"_lanes", "_t0"}.isdisjoint(
        {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    )


def test_the_range_join_steps_nest_a_small_database(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlmodules, "CHECK", True)
    con = _base_tables(tmp_path)
    sqlmodules.fetch(con, "model/axis_lanes", kinds=CPU_NEST_KINDS)
    sqlmodules.run(con, "model/axis", kinds=CPU_NEST_KINDS, spread=1 << 20)
    sqlmodules.run(con, "model/containers", kinds=CONTAINER_KINDS)
    sqlmodules.run(con, "model/nest_containers", bleed=BLEED_NS, same_lane="")
    sqlmodules.run(con, "model/nest_leaves", launch_kinds=LAUNCH_KINDS, bleed=BLEED_NS)
    names = dict(con.execute("SELECT id, name FROM _cpu").fetchall())
    nest = {
        names[i]: (depth, names.get(parent), names.get(op), annotations)
        for i, depth, parent, op, annotations in con.execute(
            "SELECT id, depth, parent_id, op_id, annotations FROM _nest"
        ).fetchall()
    }
    assert nest == {
        "attention": (0, None, None, []),
        "aten::mm": (1, "attention", None, ["attention"]),
        "cudaLaunchKernel": (2, "aten::mm", "aten::mm", ["attention"]),
        "aten::add": (0, None, None, []),
    }
    sqlmodules.drop_private(con)
    left = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
    assert left == set()


def test_a_macro_module_creates_the_one_macro_it_declares():
    """The build's check skips macro modules (listing a connection's functions is slow): their text is checked."""
    macros = [m for m in MODULES if m.statements[0].startswith("CREATE OR REPLACE {{macro}}")]
    assert len(macros) >= 15
    for m in macros:
        assert len(m.statements) == 1 and list(m.creates) == [sqlmodules.signature(m)[0]], m.path


def test_every_base_macro_is_created():
    from tracekit.store import database

    assert {m.name for m in database.MACROS} == {m.name for m in sqlmodules.folder("store/base_macros")}


def test_a_pattern_hits_slot_writes_each_rule_pattern_as_a_literal(tmp_path):
    m = _module(
        tmp_path,
        "-- Title.\n-- @creates _hits  doc\nCREATE TEMP TABLE _hits AS\n"
        "WITH n AS (SELECT * FROM (VALUES ('aten::mm'), ('it''s'), ('aten::add')) t(name))\n"
        "SELECT * FROM ({{pattern_hits rules n name}});\n",
    )
    con = duckdb.connect()
    con.execute("CREATE TABLE rules AS SELECT * FROM (VALUES ('^aten::m'), ('it''s'), (NULL)) t(pattern)")
    (statement,) = m.render({}, con)
    # One SELECT per pattern, each regex a literal (compiled once), the quote doubled.
    assert statement.count("regexp_matches(name, '^aten::m')") == 1 and "'it''s'" in statement
    con.execute(statement)
    assert sorted(con.execute("SELECT * FROM _hits").fetchall()) == [("aten::mm", "^aten::m"), ("it's", "it's")]
    with pytest.raises(ValueError, match="needs the connection"):
        m.render({})
    con.execute("DELETE FROM rules")
    (statement,) = m.render({}, con)
    con.execute(statement.replace("_hits", "_none"))
    assert con.execute("SELECT count(*) FROM _none").fetchall() == [(0,)]


def test_an_include_may_name_its_fragment_by_a_keyword_parameter(tmp_path):
    m = _module(
        tmp_path,
        "-- Title.\n-- @param bounds KEYWORD(attribution/graph_nearest_kernels|attribution/no_graph_nearest_kernels)  which\n"
        "-- @creates t  doc\nCREATE TABLE t AS SELECT {{include bounds}};\n",
    )
    (windows,) = m.render({"bounds": "attribution/graph_nearest_kernels"})
    (nulls,) = m.render({"bounds": "attribution/no_graph_nearest_kernels"})
    assert "OVER up AS graph_closed_before" in windows and "NULL::BIGINT AS graph_closed_before" in nulls
    with pytest.raises(ValueError, match="must be one of"):
        m.render({"bounds": "model/inside"})
    with pytest.raises(ValueError, match="must be a KEYWORD"):
        _module(
            tmp_path,
            "-- Title.\n-- @param f IDENT  which\n-- @creates t  doc\nCREATE TABLE t AS SELECT {{include f}};\n",
        )


def test_an_if_block_writes_the_branch_its_bool_parameter_chooses(tmp_path):
    m = _module(
        tmp_path,
        "-- Title.\n-- @param multi BOOL  several\n-- @param typed BOOL  typed\n-- @param n INT  a number\n"
        "-- @creates t  doc\nCREATE TABLE t AS SELECT {{if multi}}{{n}} AS part, {{if typed}}1{{else}}2{{endif}} AS k,"
        "{{else}}0 AS k,{{endif}} {{multi}} AS multi;\n",
    )
    assert m.render({"multi": True, "typed": False, "n": 7}) == [
        "CREATE TABLE t AS SELECT 7 AS part, 2 AS k, true AS multi"
    ]
    assert m.render({"multi": False, "typed": True, "n": 7}) == ["CREATE TABLE t AS SELECT 0 AS k, false AS multi"]
    with pytest.raises(ValueError, match=r"m\.sql:2: parameter multi must be a bool, got 1"):
        m.render({"multi": 1, "typed": True, "n": 7})
    broken = {
        "{{if n}}1{{endif}}": r"\{\{if n\}\} must name one BOOL parameter",
        "{{if b}}1": r"an \{\{if\}\} without its \{\{endif\}\}",
        "1{{endif}}": r"\{\{endif\}\} without its \{\{if\}\}",
        "{{if b}}1{{else}}2{{else}}3{{endif}}": r"\{\{else\}\} without its \{\{if\}\}",
    }
    for body, error in broken.items():
        with pytest.raises(ValueError, match=error):
            _module(
                tmp_path,
                f"-- T.\n-- @param b BOOL  b\n-- @param n INT  n\n-- @creates t  d\nCREATE TABLE t AS SELECT {body}, {{{{b}}}}, {{{{n}}}};\n",
            )


def test_a_value_parameter_is_written_as_a_duckdb_constant(tmp_path):
    m = _module(tmp_path, "-- Title.\n-- @param v VALUE  anything\n-- @fragment\nSELECT {{v}} AS v\n")
    value = {"files": ["/a/t1.0000.json", "it's"], "n": 3, "none": None, "yes": True, "types": {"ts": "DECIMAL(24,3)"}}
    (query,) = m.render({"v": value})
    assert query.startswith("SELECT {'files': ['/a/t1.0000.json', 'it''s'], 'n': 3, 'none': NULL, 'yes': true")
    assert duckdb.connect().execute(query).fetchall() == [(value,)]
    with pytest.raises(ValueError, match=r"m\.sql:2: parameter v: not a constant"):
        m.render({"v": [1.5]})
    # An included fragment is given NULL as None.
    inc = _module(
        tmp_path,
        "-- Title.\n-- @fragment\nSELECT {{include ingest/read/nanoseconds us=x c1=NULL c2=NULL c3=NULL}} FROM t\n",
    )
    (query,) = inc.render({})
    assert "NULL * 1000 + CAST(TRY_CAST(x - NULL AS DECIMAL(15,3))" in query
