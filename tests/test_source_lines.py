"""Source lines: the user-code frame that issued each attention call and each top kernel (with_stack traces).

The expected frame is found here from the raw JSON alone: the python_function events of the call's (or the
launch's) thread whose time holds it, named "file(line): function", less those whose file lies in torch or
transformers (the libraries these recordings run through); the innermost (latest start) is the one. The
profiler names each frame by the function's first line, which is the line the source gives.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from tracekit import cli

ROOT = Path(__file__).resolve().parent.parent
BERT = "tracelens/h100_bert-small_sdpa-flash.json.gz"
FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
LIBRARY = re.compile(r"(^|/)(torch|transformers)/")


def _ns(us) -> int:
    return int(Decimal(str(us)) * 1000)


def _innermost_user_frame(events: list[dict], pid, tid, ts: int, end: int, skip=None) -> str | None:
    best = None
    for e in events:
        if e.get("cat") != "python_function" or e is skip or e["pid"] != pid or e["tid"] != tid:
            continue
        m = FRAME.match(e["name"])
        if not m or LIBRARY.search(m[1]):
            continue
        start, stop = _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])
        if start <= ts and stop >= end and (best is None or start > best[0]):
            best = (start, f"{m[1]}:{m[2]} {m[3]}")
    return best and best[1]


def test_call_and_kernel_sources_match_the_recording(shared_dir, load_shared):
    events = json.loads(gzip.decompress((shared_dir / BERT).read_bytes()))["traceEvents"]
    trace = load_shared(BERT)
    calls = trace.query("call_sources").to_dicts()
    assert len(calls) == 4 and all(c["stacks"] for c in calls)
    for call in calls:
        # The calls are nn.Module scopes (BertAttention_N): python_function events themselves.
        scope = next(e for e in events if e.get("cat") == "python_function" and e["name"] == call["op"])
        ts = _ns(scope["ts"])
        want = _innermost_user_frame(events, scope["pid"], scope["tid"], ts, ts + _ns(scope["dur"]), skip=scope)
        assert call["source"] == want
        assert (call["file"], call["line"], call["function"]) == (
            "moca/library/model_hub/huggingface/model/adapters/text_base_model.py",
            28,
            "run_on_input",
        )
    # The heaviest kernel: each launch's frame, from the runtime or driver call of the same correlation id.
    kernels = trace.query("kernel_sources", limit=1).to_dicts()
    name = kernels[0]["name"]
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})
    }
    want: dict[str | None, int] = {}
    for k in (e for e in events if e.get("cat") == "kernel" and e["name"] == name):
        r = launches.get(k["args"]["correlation"])
        if r is None:  # launched before the trace began: an orphan, left out
            continue
        ts = _ns(r["ts"])
        source = _innermost_user_frame(events, r["pid"], r["tid"], ts, ts + _ns(r["dur"]))
        want[source] = want.get(source, 0) + 1
    assert {k["source"]: k["count"] for k in kernels} == want


def test_stages_lists_where_calls_came_from_or_says_there_are_no_stacks(shared_dir, inputs, monkeypatch, capsys):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(inputs.cache))
    assert cli.main(["stages", str(ROOT / "sample_traces" / "gpu_h200" / "naive.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "Issued from" in out and "no Python stacks in this trace: record it with with_stack=True" in out
    assert cli.main(["stages", str(shared_dir / BERT), "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["python_stacks"] is True
    assert {c["source"] for c in doc["attention_calls"]} == {
        "moca/library/model_hub/huggingface/model/adapters/text_base_model.py:28 run_on_input"
    }


@pytest.mark.slow
def test_a_cpu_capture_with_stacks_names_the_capture_modules_line(tmp_path, inputs):
    """A tiny CPU attention recorded with with_stack=True: the call's range is opened in capture/attention.py's
    forward(), whose first line the source names."""
    pytest.importorskip("torch")
    import capture

    outcome = capture.run_attention(
        "naive",
        out=tmp_path,
        tag="stack",
        device="cpu",
        dtype="float32",
        warmup=1,
        steps=1,
        shape=capture.AttentionShape(1, 2, 32, 8),
        with_stack=True,
    )
    path = outcome.result.trace
    calls = inputs.trace(path).query("call_sources").to_dicts()
    assert calls and all(c["stacks"] for c in calls)
    lines = (ROOT / "capture" / "attention.py").read_text().splitlines()
    forward = next(i for i, text in enumerate(lines, start=1) if text.strip().startswith("def forward() -> Any:"))
    for call in calls:
        assert call["file"].endswith("capture/attention.py"), call
        assert (call["line"], call["function"]) == (forward, "forward")
