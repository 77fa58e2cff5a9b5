"""The checked-in sample traces match their manifests (no torch needed), and the GPU samples' recorder
writes that layout (run on the CPU at tiny shapes)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_attention"


def test_manifest_lists_valid_small_traces():
    manifest = json.loads((SAMPLES / "manifest.json").read_text())
    assert manifest["label_scheme"] == "tracekit-1"
    impls = [t["impl"] for t in manifest["traces"]]
    assert {"naive", "inplace", "math", "auto"} <= set(impls)
    listed = {t["file"] for t in manifest["traces"]}
    assert listed == {p.name for p in SAMPLES.glob("*.json.gz")}
    for entry in manifest["traces"]:
        path = SAMPLES / entry["file"]
        assert path.stat().st_size <= 1 << 20
        trace = json.loads(gzip.decompress(path.read_bytes()))
        meta = trace["tracekit_capture"]
        assert meta["impl"] == entry["impl"]
        assert meta["shapes"] == manifest["shapes"]
        assert meta["dtype"] == manifest["dtype"] and meta["torch_version"] == manifest["torch_version"]
        names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
        assert f"attention:{entry['impl']}" in names
        # Hand-written variants label their stages; SDPA variants leave it to the ops.
        assert any(n.startswith("stage:") for n in names) == (entry["impl"] in ("naive", "inplace"))
        assert (SAMPLES / entry["key_averages_txt"]).is_file()
        figures = json.loads((SAMPLES / entry["key_averages_json"]).read_text())
        assert figures["regions"][f"attention:{entry['impl']}"]["count"] == manifest["schedule"]["active"]
    for skipped in manifest["unavailable"]:
        assert skipped["reason"] and "\n" not in skipped["reason"]


def test_gpu_manifest_lists_its_traces_and_models():
    folder = SAMPLES.parent / "gpu_h200"
    manifest = json.loads((folder / "manifest.json").read_text())
    listed = {t["file"] for t in manifest["traces"] + manifest["models"]}
    assert listed == {p.name for p in folder.glob("*.json.gz")}
    for entry in manifest["models"]:
        trace = json.loads(gzip.decompress((folder / entry["file"]).read_bytes()))
        names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}
        # The unlabelled twin carries no label at all: what a serving stack's trace looks like.
        assert any(n.startswith("attention:") for n in names) == entry["labelled"]


def test_gpu_recorder_writes_the_same_layout(tmp_path, monkeypatch):
    """`samples --gpu`'s recorder, run on the CPU at tiny shapes (its device switch is for this
    test): the variants, the labelled and unlabelled Llama, its training step, and a manifest
    naming them all."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from capture import samples
    from capture.attention import AttentionShape

    monkeypatch.setattr(samples, "GPU_SAMPLE_IMPLS", ("naive", "flash"))
    monkeypatch.setattr(samples, "GPU_SAMPLE_SHAPE", AttentionShape(batch=1, heads=2, seq=32, head_dim=16))
    tiny = dict(samples.GPU_SAMPLE_LLAMA, hidden_size=64, intermediate_size=128, num_attention_heads=4)
    monkeypatch.setattr(samples, "GPU_SAMPLE_LLAMA", dict(tiny, num_key_value_heads=4, vocab_size=100))
    monkeypatch.setattr(samples, "GPU_SAMPLE_LLAMA_INPUT", {"batch": 1, "seq": 16})
    path, outcomes = samples.record_gpu_samples(tmp_path / "gpu_cpu", device="cpu")
    manifest = json.loads(path.read_text())
    assert [o.impl for o in outcomes] == ["naive", "flash"] and all(o.result for o in outcomes)
    assert [t["impl"] for t in manifest["traces"]] == ["naive", "flash"]
    assert [(m["file"], m["labelled"], m.get("training", False)) for m in manifest["models"]] == [
        ("llama_eager.json.gz", True, False),
        ("llama_eager_unlabelled.json.gz", False, False),
        ("llama_train_sdpa.json.gz", True, True),
    ]
    on_disk = {p.name for p in (tmp_path / "gpu_cpu").glob("*.json.gz")}
    assert on_disk == {p["file"] for p in manifest["traces"] + manifest["models"]}
    with gzip.open(tmp_path / "gpu_cpu" / "llama_train_sdpa.json.gz", "rt") as fh:
        train = json.load(fh)
    names = {e["name"] for e in train["traceEvents"]}
    assert train["tracekit_capture"]["training"] is True
    assert any("backward" in n.lower() for n in names) and "attention:LlamaAttention" in names


def test_samples_gpu_without_a_gpu_is_one_line_error(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from capture.cli import main

    assert main(["samples", "--gpu", "--out", "unused"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "Error: samples --gpu needs a CUDA device; torch.cuda.is_available() is False"
