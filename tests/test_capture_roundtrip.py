"""Round trip: traces the capture module records on CPU load in tracekit, attributed.

The profiler's own key_averages() figures, written beside each trace, are the
independent reference for the per-region CPU time tracekit reports.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_attention_args  # noqa: E402
from test_capture_model import TinyModel  # noqa: E402

import capture  # noqa: E402
import tracekit  # noqa: E402

SHAPE = capture.AttentionShape(batch=1, heads=2, seq=64, head_dim=16)
LABELLED_STAGES = {"qk_matmul", "scale", "mask", "softmax", "pv_matmul"}


@pytest.mark.parametrize("impl", capture.IMPLS)
def test_recorded_trace_round_trips_with_its_stages(impl, tmp_path):
    outcome = capture.run_attention(
        impl, out=tmp_path, flat=True, shape=SHAPE, dtype="float32", device="cpu", warmup=1, steps=2
    )
    if outcome.unavailable is not None:
        pytest.skip(f"{impl} unavailable on CPU: {outcome.unavailable}")
    path = outcome.result.trace
    figures = json.loads(path.with_name(path.name.replace(".json.gz", ".key_averages.json")).read_text())["regions"]
    with tracekit.load(path) as trace:
        # Per-region CPU time equals the profiler's own figures (µs with ns resolution).
        regions = {r["region"]: r for r in trace.query("region_summary").to_dicts()}
        for name, fig in figures.items():
            assert regions[name]["occurrences"] == fig["count"], name
            assert regions[name]["cpu_time_total_ns"] / 1000 == pytest.approx(
                fig["cpu_time_total_us"], abs=0.002 * fig["count"]
            )
        calls = trace.query("attention_calls").to_dicts()
        assert len(calls) == 2 and {c["op"] for c in calls} == {f"attention:{impl}"}
        stages = {r["stage"]: r for r in trace.query("stage_breakdown").to_dicts()}
        if impl in ("naive", "inplace"):
            # The capture module's labels decide, with no configuration.
            assert set(stages) >= LABELLED_STAGES
            assert all(stages[s]["cpu_by_label"] == stages[s]["cpu_ops"] > 0 for s in LABELLED_STAGES)
            assert {c["impl"] for c in calls} == {impl}  # the label names it
        else:
            # SDPA and flex carry no stage label: their ops decide.
            assert all(r["cpu_by_label"] == 0 for r in stages.values())
            # What ran decides the impl: unpinned SDPA on CPU runs this torch's flash backend.
            assert {c["impl"] for c in calls} == {"flash" if impl == "auto" else impl}
            assert set(stages) - {"other"}


def test_model_mode_round_trip_labels_projections(tmp_path):
    model = TinyModel(layers=2).eval()
    ids = torch.randint(0, 50, (1, 16))
    result = capture.profile_model(model, ids, tmp_path, name="tiny", flat=True, warmup=1, steps=2)
    with tracekit.load(result.trace) as trace:
        calls = trace.query("attention_calls").to_dicts()
        assert len(calls) == 4  # 2 layers x 2 profiled steps
        assert {c["op"] for c in calls} == {"attention:LlamaAttention"}
        assert {c["impl"] for c in calls} == {"flash"}  # the CPU SDPA backend this torch picks
        assert all((c["batch"], c["heads"], c["seq_q"], c["head_dim"]) == (1, 2, 16, 16) for c in calls)
        stages = {r["stage"]: r for r in trace.query("stage_breakdown").to_dicts()}
        assert stages["qkv_proj"]["cpu_by_label"] == stages["qkv_proj"]["cpu_ops"] > 0
        assert stages["out_proj"]["cpu_by_label"] > 0
        # The dropout the model applies to SDPA's output sits after the core, outside the
        # stage:out_proj label: the op layer puts it in the output block (out_proj), one per call.
        unlabelled = trace.sql(
            "SELECT c.name FROM cpu_stages s JOIN cpu_slices c USING (id) "
            "WHERE s.stage = 'out_proj' AND s.source <> 'label' AND c.kind = 'cpu_op'"
        )["name"].to_list()
        assert unlabelled == ["aten::dropout"] * 4
        assert stages["out_proj"]["cpu_by_label"] + len(unlabelled) == stages["out_proj"]["cpu_ops"]
        assert stages["fused_attention"]["cpu_by_op"] > 0
        # The MLP's linears are outside every attention call: not attention.
        mlp = trace.sql(
            "SELECT DISTINCT s.stage FROM cpu_stages s JOIN cpu_slices c USING (id) "
            "WHERE c.name = 'aten::linear' AND s.call_id IS NULL"
        )["stage"].to_list()
        assert mlp == ["other"]


def test_tracekit_capture_command_records_and_loads(tmp_path, capsys):
    from tracekit.cli import main

    def args(impl: str) -> list[str]:
        return ["capture", *tiny_attention_args(impl, tmp_path, "--flat", "--dtype", "fp32", head_dim=16)]

    assert main(args("naive")) == 0
    assert "naive  attention:naive calls=1" in capsys.readouterr().out
    with tracekit.load(tmp_path / "naive.json.gz") as trace:
        assert trace.query("attention_calls")["impl"].to_list() == ["naive"]
    assert main(args("cudnn")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert any(line.startswith("cudnn: unavailable: ") for line in err)


@pytest.mark.parametrize("attn_impl,expected", [("eager", "naive"), ("sdpa", "flash")])
def test_hf_llama_round_trip(attn_impl, expected, tmp_path):
    """A tiny randomly initialised transformers Llama (no download), profiled and attributed."""
    transformers = pytest.importorskip("transformers")
    from capture.cli import main

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "tiny")
    assert (
        main(
            [
                "model",
                "--hf",
                str(tmp_path / "tiny"),
                "--seq",
                "16",
                "--device",
                "cpu",
                "--attn-impl",
                attn_impl,
                "--warmup",
                "1",
                "--steps",
                "2",
                "--flat",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    with tracekit.load(tmp_path / "out" / "tiny.json.gz") as trace:
        calls = trace.query("attention_calls").to_dicts()
        assert len(calls) == 4 and {c["op"] for c in calls} == {"attention:LlamaAttention"}  # 2 layers x 2 steps
        assert {c["impl"] for c in calls} == {expected}
        stages = {r["stage"]: r for r in trace.query("stage_breakdown").to_dicts()}
        assert stages["qkv_proj"]["cpu_by_label"] == stages["qkv_proj"]["cpu_ops"] > 0
        assert stages["out_proj"]["cpu_by_label"] > 0
        if attn_impl == "eager":
            # Transformers' eager attention: matmuls, softmax and mask ops, told apart by the op rules.
            assert {"qk_matmul", "softmax", "pv_matmul"} <= set(stages)
        else:
            assert {c["kv_heads"] for c in calls} == {1} and {c["heads"] for c in calls} == {2}


def test_metadata_with_quotes_newlines_and_backslashes_keeps_the_trace_valid(tmp_path):
    """Kineto writes the metadata's JSON text with backslashes turned into slashes: a command line with a double
    quote or a ``python -c`` script's newline (escaped by JSON with a backslash) broke the whole trace file. The
    metadata now reaches Kineto with no backslash, and the trace loads."""
    import gzip

    from capture.cluster import detect_cluster
    from capture.session import Schedule, capture_metadata

    meta = capture_metadata(
        device="cpu", cluster=detect_cluster(), tag="quoted", impl="x", shapes=None, dtype="float32"
    )
    meta["command_line"] = 'python -c "import x\nprint(1)" C:\\runs\\a.json --name "ü"'
    out = tmp_path / "quoted.json.gz"
    capture.session.capture(
        lambda: torch.ones(4) @ torch.ones(4),
        out,
        device="cpu",
        metadata=meta,
        warmup=1,
        schedule=Schedule(wait=0, warmup=1, active=1),
    )
    with gzip.open(out, "rt", encoding="utf-8") as fh:
        trace = json.load(fh)
    assert trace["tracekit_capture"]["command_line"] == "python -c 'import x print(1)' C:/runs/a.json --name 'ü'"
    with tracekit.load(out) as loaded:
        assert loaded.sql("SELECT count(*) FROM cpu_slices WHERE name = 'aten::matmul'").fetchall()[0][0] >= 1
