"""'-' for stdin (SOURCE) and stdout (--html/--json/-o), and the naive baseline of a one-SOURCE report."""

import gzip
import io
import json
from pathlib import Path

from click.testing import CliRunner

from tracekit.analysis import report
from tracekit.cli import cli, main

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_a100_synthetic"


def test_source_dash_reads_a_trace_from_stdin():
    raw = (SAMPLES / "flash.json.gz").read_bytes()
    for data in (raw, gzip.decompress(raw)):
        res = CliRunner().invoke(
            cli, ["query", "region_summary", "-", "-p", "pattern=^sdpa_fwd$", "-f", "json"], input=data
        )
        assert res.exit_code == 0, res.output
        row = json.loads(res.output)[0]
        assert row["gpu_ops_per_occurrence"] == 1 and row["gpu_time_avg_ns"] == 146816


def test_empty_stdin_is_one_line_error(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main(["stages", "-"]) == 1
    assert capsys.readouterr().err == (
        "Error: -: standard input is empty (pipe a trace: zcat t.json.gz | tracekit stages -)\n"
    )


def test_report_html_and_json_to_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, ["report", str(SAMPLES / "flash.json.gz"), "--html", "-"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("<!DOCTYPE html>") and res.output.rstrip().endswith("</html>")
    assert not (tmp_path / "-").exists()
    res = CliRunner().invoke(cli, ["report", str(SAMPLES / "flash.json.gz"), "--json", "-"])
    assert json.loads(res.output)["traces"][0]["label"] == "flash"


def test_one_source_of_several_traces_takes_naive_as_baseline(tmp_path):
    rep = report.build([SAMPLES])  # the folder: cudnn, efficient, flash, ... naive in file order
    labels = [t.label for t in rep.traces]
    assert labels[0] == "naive" and sorted(labels) == sorted(p.name.split(".")[0] for p in SAMPLES.glob("*.json.gz"))
    assert rep.comparison["against"] == "naive"
    # Several SOURCEs keep the order given.
    rep2 = report.build([SAMPLES / "flash.json.gz", SAMPLES / "naive.json.gz"])
    assert [t.label for t in rep2.traces] == ["flash", "naive"]
