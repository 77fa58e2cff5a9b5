"""Every command that takes several traces gives each a unique label."""

import shutil
from pathlib import Path

from click.testing import CliRunner

import tracekit
from tracekit.analysis import report
from tracekit.cli import cli

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_a100_synthetic"


def _same_names(tmp_path):
    paths = []
    for folder, variant in (("A", "naive"), ("B", "flash")):
        (tmp_path / folder).mkdir()
        p = tmp_path / folder / "graph_execution.json.gz"
        shutil.copy(SAMPLES / f"{variant}.json.gz", p)
        paths.append(p)
    return paths


def test_report_tells_same_named_files_apart_by_folder(tmp_path):
    a, b = _same_names(tmp_path)
    rep = report.build([a, b])
    assert [t.label for t in rep.traces] == ["A/graph_execution", "B/graph_execution"]
    assert [t.headline["impl"] for t in rep.traces] == ["naive", "flash"]
    assert list(rep.comparison["tables"]) == ["B/graph_execution"]


def test_load_and_report_agree_on_labels(tmp_path):
    a, b = _same_names(tmp_path)
    with tracekit.load([a, b], output=tmp_path / "run.duckdb") as trace:
        loaded = trace.sql("SELECT trace FROM traces ORDER BY trace_id")["trace"].to_list()
    assert loaded == ["A/graph_execution", "B/graph_execution"]


def test_same_source_twice_still_gets_two_labels(tmp_path):
    path = SAMPLES / "flash.json.gz"
    rep = report.build([path, path])
    labels = [t.label for t in rep.traces]
    assert len(set(labels)) == 2
    assert labels[1] == labels[0] + "#2"  # the second copy is numbered
    assert rep.traces[0].headline == rep.traces[1].headline  # one file: the same figures twice
    assert rep.traces[0].headline["impl"] == "flash" and rep.traces[0].headline["attention_calls"] == 3
    assert list(rep.comparison["tables"]) == [labels[1]]


def test_one_trace_report_has_no_ratio_to_itself():
    res = CliRunner().invoke(cli, ["report", str(SAMPLES / "flash.json.gz")])
    assert res.exit_code == 0, res.output
    assert "vs first" not in res.output and "GPU time / call" in res.output
    lines = res.output.splitlines()
    assert lines[0] == "tracekit report: 1 trace"
    # By construction (tests/synthetic.py): three calls of one 146,816 ns flash kernel each.
    assert [ln.split()[-1] for ln in lines if ln.startswith("attention calls ")] == ["3"]
    assert [ln.split()[-2:] for ln in lines if ln.startswith("GPU time / call (op-level)")] == [["146.8", "\u00b5s"]]
