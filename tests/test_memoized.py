"""Trace.memoized: queries run more than once in a scope (a report's) are computed once, with the same
answers as without it, on real traces (the shared and the H200 sample traces)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tracekit.analysis import report

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "sample_traces" / "gpu_h200"


def _memo_tables(trace) -> int:
    return trace.rows(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND starts_with(table_name, '_tracekit_memo')"
    )[0][0]


def test_a_kept_query_is_computed_once_and_dropped_on_exit(tmp_path):
    db = tmp_path / "t.duckdb"
    tracekit.load(H200 / "llama_train_sdpa.json.gz", output=db).close()
    with tracekit.open(db) as trace:  # read-only, as a report opens a cached database
        plain = {n: trace.query_arrow(n) for n in ("gpu_breakdown", "headline")}
        orphans = trace.query_arrow("gpu_breakdown", {"include_orphans": True})
        with trace.memoized(["gpu_breakdown", "gpu_timeline"]):
            assert trace.query_arrow("gpu_breakdown") == plain["gpu_breakdown"]  # computed and kept
            assert _memo_tables(trace) == 1
            assert trace.query_arrow("gpu_breakdown") == plain["gpu_breakdown"]  # read back, not recomputed
            assert _memo_tables(trace) == 1
            assert trace.query_arrow("gpu_breakdown", {"include_orphans": True}) == orphans  # other parameters
            assert _memo_tables(trace) == 2
            assert trace.query_arrow("headline") == plain["headline"]  # keeps gpu_timeline
            assert _memo_tables(trace) == 3
        assert _memo_tables(trace) == 0


@pytest.mark.parametrize(
    "source",
    [
        H200 / "llama_train_sdpa.json.gz",
        H200 / "naive.json.gz",
        "hta/a100_nccl_rank0.json.gz",
        "tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz",
    ],
    ids=lambda s: Path(s).name.split(".")[0],
)
def test_a_report_is_the_same_with_and_without_kept_queries(source, request, monkeypatch):
    path = source if isinstance(source, Path) else request.getfixturevalue("shared_dir") / source
    kept = report.build([path]).to_dict()
    monkeypatch.setattr(report, "SHARED", ())
    assert report.build([path]).to_dict() == kept
