"""The checked-in CPU sample traces match their manifest (no torch needed)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

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
