"""Capture -> report: side files are skipped silently, labels come from the capture metadata,
and the naive variant is the baseline (the project's CPU captures in sample_traces/cpu_attention)."""

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

import tracekit
from tracekit.analysis import report
from tracekit.cli import cli

CAPTURES = Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_attention"


def _as_capture_writes_them(tmp: Path) -> Path:
    """The samples laid out under capture's default long names, with their side files."""
    run = tmp / "b2_h4_s128_d32"
    run.mkdir()
    manifest = json.loads((CAPTURES / "manifest.json").read_text())
    for t in manifest["traces"]:
        stem = f"rank00000.gpu-node-7.{t['impl']}.20261203T074100Z"
        shutil.copy(CAPTURES / t["file"], run / f"{stem}.json.gz")
        for key in ("key_averages_txt", "key_averages_json"):
            suffix = ".key_averages.txt" if key.endswith("txt") else ".key_averages.json"
            shutil.copy(CAPTURES / t[key], run / f"{stem}{suffix}")
    shutil.copy(CAPTURES / "manifest.json", run / "manifest.json")
    return run


def test_report_of_a_capture_folder(tmp_path):
    run = _as_capture_writes_them(tmp_path)
    res = CliRunner().invoke(cli, ["report", str(run)])
    assert "skipped" not in res.output  # click's output holds stderr too
    assert res.exit_code == 0, res.output
    rep = report.build([run])
    labels = [t.label for t in rep.traces]
    assert labels[0] == "naive"
    assert sorted(labels) == sorted(t["impl"] for t in json.loads((CAPTURES / "manifest.json").read_text())["traces"])


def test_labels_fall_back_when_impls_repeat(tmp_path):
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copy(CAPTURES / "flash.json.gz", a)
    shutil.copy(CAPTURES / "flash.json.gz", b)
    with tracekit.load([a, b]) as trace:
        labels = trace.sql("SELECT trace FROM traces ORDER BY trace_id")["trace"].to_list()
    assert labels == ["a", "b"]  # impl (flash) and impl-device (flash-cpu) would repeat: names stay


def test_labels_stay_unique_when_a_folder_loads_in_worker_processes(tmp_path):
    """Each worker loads one file and cannot tell whether its impl repeats in the folder: the merge
    labels every trace once, over all of them (two files of impl flash kept their names only in a
    one-process load; in workers both became 'flash')."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(CAPTURES / "flash.json.gz", run / "a.json.gz")
    shutil.copy(CAPTURES / "flash.json.gz", run / "b.json.gz")
    shutil.copy(CAPTURES / "naive.json.gz", run / "c.json.gz")
    for jobs in (1, 2):
        with tracekit.load(run, output=tmp_path / f"j{jobs}.duckdb", jobs=jobs) as trace:
            labels = trace.sql("SELECT trace FROM traces ORDER BY trace_id")["trace"].to_list()
        assert labels == ["a", "b", "c"], jobs  # flash repeats, so no trace takes its impl (naive alone would)
