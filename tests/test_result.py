"""The Python API's one result type, one parameter style, and Jupyter display."""

import builtins
import html
from pathlib import Path

import polars
import pyarrow as pa
import pytest

import tracekit
from tracekit import diff
from tracekit.analysis import report
from tracekit.errors import TracekitError

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_a100_synthetic"


@pytest.fixture(scope="module")
def flash():
    with tracekit.load(SAMPLES / "flash.json.gz") as trace:
        yield trace


def test_query_and_sql_return_one_result_type(flash):
    q = flash.query("region_summary", pattern="^sdpa_fwd$")
    s = flash.sql("SELECT trace FROM traces")
    assert isinstance(q, tracekit.Result) and isinstance(s, tracekit.Result)
    assert isinstance(q.pl(), polars.DataFrame) and isinstance(q.arrow(), pa.Table)
    row = q.to_dicts()[0]
    assert row["gpu_ops_per_occurrence"] == 1 and round(row["gpu_time_avg_ns"] / 1000, 1) == 146.8
    assert q.fetchall()[0] == tuple(row.values())
    assert q.columns == list(row) and len(q) == 1
    # Answers as the polars frame too (code written for the old return type keeps working).
    assert q["trace"].to_list() == ["flash"] and q.rows() == q.fetchall()


def test_parameters_as_mapping_or_keywords(flash):
    a = flash.query("top_kernels", {"limit": 1}).to_dicts()
    b = flash.query("top_kernels", limit=1).to_dicts()
    assert a == b and len(a) == 1
    assert flash.sql("SELECT $x::INTEGER + 1 AS y", {"x": 41}).fetchall() == [(42,)]


def test_diff_compare_returns_a_result(flash):
    with tracekit.load(SAMPLES / "naive.json.gz") as naive:
        r = diff.compare(naive, flash, per_call=True)
    assert isinstance(r, tracekit.Result)
    by_stage = {x["stage"]: x for x in r.to_dicts()}
    assert by_stage["fused_attention"]["change"] == "added"
    assert r.to_pylist() == r.to_dicts()  # Arrow's name still answers


def test_df_without_pandas_says_what_to_install(flash, monkeypatch):
    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(TracekitError, match=r"needs pandas.*pip install"):
        flash.query("gpu_timeline").df()


def test_df_with_pandas(flash):
    pandas = pytest.importorskip("pandas", reason="pandas is an optional extra, not installed here")
    frame = flash.query("gpu_timeline").df()
    assert isinstance(frame, pandas.DataFrame) and list(frame["trace"]) == ["flash"]


def test_jupyter_display(flash):
    shown = flash.query("region_summary", pattern="^sdpa_fwd$")._repr_html_()
    assert "<table>" in shown and "gpu_time_avg_µs" in shown and "146.8" in shown
    assert "gpu_time_avg_µs" in repr(flash.query("region_summary", pattern="^sdpa_fwd$"))
    page = report.build([flash])._repr_html_()
    assert page.startswith("<iframe srcdoc=") and "Attention report" in html.unescape(page)


def test_package_is_typed():
    assert (Path(tracekit.__file__).parent / "py.typed").is_file()
