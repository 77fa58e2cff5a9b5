"""The attention experiment on CPU: every implementation records or is skipped cleanly."""

from __future__ import annotations

import gzip
import json

import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_attention_args  # noqa: E402

import capture  # noqa: E402
from capture.cli import main  # noqa: E402

SHAPE = capture.AttentionShape(batch=1, heads=2, seq=64, head_dim=16)
OPTIONS = dict(shape=SHAPE, dtype="float32", device="cpu", warmup=1, steps=2)

EXPECTED_STAGES = {
    "naive": {"stage:qk_matmul", "stage:scale", "stage:mask", "stage:softmax", "stage:pv_matmul"},
    "inplace": {"stage:qk_matmul", "stage:scale", "stage:mask", "stage:softmax", "stage:pv_matmul"},
}
# What a CPU build of torch must be able to run: the rest may be refused.
MUST_RUN_ON_CPU = {"naive", "inplace", "math", "auto"}


def load_trace(path):
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def annotations(trace):
    return [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]


@pytest.mark.parametrize("impl", capture.IMPLS)
def test_each_implementation_records_or_is_skipped_with_one_line(impl, tmp_path):
    outcome = capture.run_attention(impl, out=tmp_path, flat=True, **OPTIONS)
    if outcome.unavailable is not None:
        assert impl not in MUST_RUN_ON_CPU, outcome.unavailable
        assert "\n" not in outcome.unavailable and outcome.unavailable.strip()
        assert "Traceback" not in outcome.unavailable
        assert outcome.line().startswith(f"{impl}: unavailable: ")
        assert list(tmp_path.iterdir()) == []
        pytest.skip(f"{impl} unavailable on CPU: {outcome.unavailable}")

    result = outcome.result
    assert result.trace == tmp_path / f"{impl}.json.gz"
    trace = load_trace(result.trace)
    names = [e["name"] for e in annotations(trace)]
    assert names.count(f"attention:{impl}") == 2  # one per profiled step
    stages = {n for n in names if n.startswith("stage:")}
    assert stages == EXPECTED_STAGES.get(impl, set())  # SDPA/flex: the ops tell the stages

    meta = trace["tracekit_capture"]
    assert isinstance(meta, dict), "metadata must land as a JSON object, not a string"
    assert meta["impl"] == impl
    assert meta["label_scheme"] == "tracekit-1"
    assert meta["device"] == "cpu"
    assert meta["dtype"] == "float32"
    assert meta["causal"] is True
    assert meta["shapes"] == {"batch": 1, "heads": 2, "seq_q": 64, "seq_kv": 64, "head_dim": 16}
    assert meta["torch_version"] == torch.__version__
    assert meta["profiler"]["schedule"] == {"wait": 1, "warmup": 1, "active": 2, "repeat": 1}
    for key in (
        "gpu_name",
        "sm_count",
        "cuda_version",
        "cudnn_version",
        "hip_version",
        "host",
        "rank",
        "world_size",
        "local_rank",
        "job_id",
        "command_line",
        "tag",
        "capture_version",
    ):
        assert key in meta

    figures = json.loads(result.key_averages_json.read_text())
    region = figures["regions"][f"attention:{impl}"]
    assert region["count"] == 2
    assert region["cpu_time_total_us"] > 0
    assert 0 < region["self_cpu_time_total_us"] <= region["cpu_time_total_us"]
    assert region["device_time_total_us"] is None  # CPU run
    assert set(figures["regions"]) == {f"attention:{impl}"} | stages
    assert f"attention:{impl}" in result.key_averages_txt.read_text()


def test_naive_keeps_the_out_of_place_copy_and_inplace_drops_it(tmp_path):
    ops = {}
    for impl in ("naive", "inplace"):
        result = capture.run_attention(impl, out=tmp_path, flat=True, **OPTIONS).result
        ops[impl] = {e["name"] for e in load_trace(result.trace)["traceEvents"] if e.get("cat") == "cpu_op"}
    assert "aten::masked_fill" in ops["naive"]
    assert "aten::masked_fill" not in ops["inplace"]
    assert "aten::masked_fill_" in ops["inplace"]


def test_no_causal_has_no_mask_stage(tmp_path):
    result = capture.run_attention("naive", out=tmp_path, flat=True, causal=False, **OPTIONS).result
    trace = load_trace(result.trace)
    assert "stage:mask" not in {e["name"] for e in annotations(trace)}
    assert trace["tracekit_capture"]["causal"] is False


def test_cluster_layout_path(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    result = capture.run_attention("auto", out=tmp_path, tag="run1", **OPTIONS).result
    assert result.trace.parent == tmp_path / "run1"
    assert result.trace.name.startswith("rank00002.")
    assert ".auto." in result.trace.name and result.trace.name.endswith(".json.gz")
    assert result.key_averages_txt.name == result.trace.name.replace(".json.gz", ".key_averages.txt")
    assert load_trace(result.trace)["tracekit_capture"]["rank"] == 2


def test_cli_all_prints_one_line_per_impl(tmp_path, capsys):
    args = tiny_attention_args("naive,math", tmp_path)
    assert main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["naive", "math"]
    assert all("attention:" in line and str(tmp_path) in line for line in lines)


def test_cli_named_unavailable_impl_fails_with_one_line(tmp_path, capsys):
    # cudnn never runs on a CPU device; on a CUDA build it is refused too with --device cpu.
    code = main(tiny_attention_args("cudnn", tmp_path, steps=False))
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    err = [line for line in captured.err.splitlines() if line.startswith("cudnn")]
    assert len(err) == 1 and err[0].startswith("cudnn: unavailable: SDPBackend.CUDNN_ATTENTION")
    assert "Traceback" not in captured.err


def test_cli_errors_are_one_line(capsys):
    assert main(["attention", "--impl", "bogus"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: unknown --impl bogus") and err.count("\n") == 1
    assert main(["attention", "--impl", "naive", "--ranks", "x"]) == 1
    assert capsys.readouterr().err.startswith("Error: bad --ranks value")


def test_stage_outside_vocabulary_is_rejected():
    with pytest.raises(ValueError, match="unknown attention stage 'softmx'"), capture.stage("softmx"):
        pass
    with pytest.raises(ValueError, match="without whitespace"), capture.attention_call("my impl"):
        pass
