"""One count, one label, and a sentence where a part is empty: the same trace gets the same label on every load
path, the views count the same calls, stages add up, and an empty part says what the trace lacks."""

import gzip
import json
from pathlib import Path

import pytest

import tracekit
from tracekit.analysis import report, stages

H200 = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_h200"


def _labels(trace) -> list[str]:
    return trace.sql("SELECT trace FROM traces ORDER BY trace_id")["trace"].to_list()


@pytest.mark.slow
def test_a_dataset_labels_a_trace_as_a_database_does(tmp_path):
    """llama_train_sdpa (recorded by tracekit capture, impl LlamaAttention) beside naive: LlamaAttention in a
    .duckdb and, since the dataset's commit labels them by the same rule, in a Parquet dataset too."""
    files = [H200 / "llama_train_sdpa.json.gz", H200 / "naive.json.gz"]
    with tracekit.load(files, output=tmp_path / "two.duckdb") as trace:
        in_db = _labels(trace)
    from tracekit.store import dataset

    dataset.build(files, tmp_path / "ds", jobs=1)
    with tracekit.load(tmp_path / "ds") as trace:
        in_dataset = _labels(trace)
    assert in_db == in_dataset == ["LlamaAttention", "naive"]


def _rank_file(path: Path, rank: int, world: int) -> Path:
    doc = {
        "distributedInfo": {"rank": rank, "world_size": world},
        "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@pytest.mark.parametrize(("world", "warned"), [(1, False), (None, False), (2, True)])
def test_the_same_rank_warning_needs_a_job_or_a_world_to_tie_the_traces(tmp_path, world, warned):
    """Two single-GPU traces that each say rank 0 (world of 1, or none) are unrelated; two of one world of 2
    claim the same rank."""
    a = _rank_file(tmp_path / "a.json.gz", 0, world)
    b = _rank_file(tmp_path / "b.json.gz", 0, world)
    said: list[str] = []
    tracekit.load([a, b], warn=said.append).close()
    assert any("2 traces claim rank 0 of the same world" in line for line in said) is warned, said


def test_stages_add_up_to_attention_with_a_total_row(inputs):
    """llama_train_sdpa: each attention stage's attention_share_pct is its part of the attention stages' GPU time
    (summed here from gpu_ns), they add up to 100, and the total row sums them ('other' aside)."""
    trace = inputs.trace(H200 / "llama_train_sdpa.json.gz")
    table = stages.with_total(trace.query_arrow("stage_breakdown"))
    rows = table.to_pylist()
    attention = [r for r in rows if r["stage"] not in ("other", stages.TOTAL)]
    attention_ns = sum(r["gpu_ns"] for r in attention)
    for r in attention:
        assert r["attention_share_pct"] == pytest.approx(100.0 * r["gpu_ns"] / attention_ns, abs=0.001)
    assert sum(r["attention_share_pct"] for r in attention) == pytest.approx(100.0, abs=0.01)
    (total,) = [r for r in rows if r["stage"] == stages.TOTAL]
    (other,) = [r for r in rows if r["stage"] == "other"]
    assert (total["gpu_ns"], total["gpu_ops"], total["attention_share_pct"]) == (
        attention_ns,
        sum(r["gpu_ops"] for r in attention),
        100.0,
    )
    assert total["share_pct"] + other["share_pct"] == pytest.approx(100.0, abs=0.01)
    assert rows[-1]["stage"] == stages.TOTAL


def test_stages_and_report_count_the_same_calls(inputs):
    """A training step: attention_calls lists 6 forward and 6 backward calls; stages says so, and the report's
    6 attention calls and 6 backward calls are the same rows."""
    trace = inputs.trace(H200 / "llama_train_sdpa.json.gz")
    calls = trace.query_arrow("attention_calls")
    directions = calls.column("direction").to_pylist()
    assert stages.call_counts(calls) == ": 6 forward (report's attention calls), 6 backward"
    (head,) = trace.query("headline").to_dicts()
    assert (head["attention_calls"], head["backward_calls"]) == (
        sum(d != "backward" for d in directions),
        directions.count("backward"),
    )


def test_a_trace_without_attention_says_so_and_what_to_record(load_shared):
    """HTA's rank 0 (ResNet-like training, NCCL): no attention call; report and stages say why in one sentence,
    naming what the trace lacks (no nn.Module scope: it has record_function labels) and what to record."""
    trace = load_shared("hta/a100_nccl_rank0.json.gz")
    (recorded,) = trace.query("recorded").to_dicts()
    assert (recorded["module_scopes"], recorded["ops_with_shapes"]) == (0, 0) and recorded["labels"] > 0
    notes = {n["topic"]: n["text"] for n in report.notes(recorded, 0)}
    assert (
        notes["attention"].startswith("No attention found")
        and "(the trace has no nn.Module scope)" in notes["attention"]
    )
    assert "with_modules=True" in notes["modules"]
    (line,) = stages.no_attention_notes(trace, trace.query_arrow("attention_calls"))
    assert line.startswith("a100_nccl_rank0: No attention found")


def test_an_empty_query_says_why(inputs):
    """module_summary on a trace recorded without with_modules: no rows, and one line saying what to record."""
    from click.testing import CliRunner

    from tracekit.cli import cli

    naive = H200 / "naive.json.gz"
    inputs.trace(naive)  # loaded once in the session's cache
    result = CliRunner().invoke(
        cli, ["query", "module_summary", str(naive)], env={"TRACEKIT_CACHE_DIR": str(inputs.cache)}
    )
    assert result.exit_code == 0, result.output
    assert "(0 rows)" in result.stdout
    assert "note: No rows: the trace has no nn.Module scopes" in result.stderr
    assert "with_modules=True" in result.stderr
