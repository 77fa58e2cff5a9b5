"""Findings people can trust: each finding's number pinned to an independent computation from the raw JSON of a
real trace (shared traces and the H200 sample recordings), a finding that must not fire, and the demo's story.

The independent figures are computed here in plain Python from the trace's events (no tracekit code): Kineto's
float microseconds times 1000, rounded, so they agree with tracekit's nanoseconds to rounding (under 1 µs).
"""

import gzip
import io
import json
import statistics
from pathlib import Path

import pytest
from rich.console import Console

from tracekit.analysis import findings, report

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "sample_traces" / "gpu_h200"
# make demo's traces, in its order (Makefile DEMO_TRACES): the post's story, naive first.
DEMO = ("naive", "inplace", "math", "efficient", "flash", "cudnn", "flex")


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


def _ns(us: float) -> int:
    return round(us * 1000)


def _device_idle_and_host_wait(events: list[dict]) -> dict:
    """Per device: (span, idle, host wait) by hand. Idle: gaps in the union of the device's GPU ops (every
    stream); host wait: such a gap whose closing op's runtime call began after the device went idle. GPU ops
    whose launch is not in the trace (orphans) are left out."""
    launch = {
        e["args"]["correlation"]: _ns(e["ts"])
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    ops: dict = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X":
            corr = e["args"].get("correlation")
            if corr in launch:
                start = _ns(e["ts"])
                ops.setdefault(e["args"].get("device", e["pid"]), []).append(
                    (start, start + _ns(e["dur"]), launch[corr])
                )
    out = {}
    for device, rows in ops.items():
        rows.sort()
        end, idle, host = rows[0][1], 0, 0
        for start, stop, launched in rows[1:]:
            if start > end:
                idle += start - end
                host += (start - end) if launched > end else 0
            end = max(end, stop)
        out[device] = (max(r[1] for r in rows) - rows[0][0], idle, host)
    return out


@pytest.fixture(scope="module")
def demo(inputs):
    """make demo's database: the seven H200 variants in one source, loaded and linked once."""
    return inputs.trace(*[H200 / f"{name}.json.gz" for name in DEMO])


def test_launch_bound_is_judged_per_device_on_the_two_rank_nccl_trace(load_shared, shared_dir):
    """HTA's rank 0: a side stream (40, 21 NCCL ops) has 583.9 ms of its own gaps, all host wait, while stream 7
    keeps the device busy; the device is idle 503.1 ms. The finding is the device's host wait, never above its
    idle time (it said 583.9 ms, 88.4 % of the span, before)."""
    trace = load_shared("hta/a100_nccl_rank0.json.gz")
    ((span, idle, host),) = _device_idle_and_host_wait(_events(shared_dir / "hta/a100_nccl_rank0.json.gz")).values()
    (row,) = trace.query("findings.launch_bound").to_dicts()
    assert row["span_ns"] == pytest.approx(span, abs=1000)
    assert row["idle_ns"] == pytest.approx(idle, abs=1000)
    assert row["host_wait_ns"] == pytest.approx(host, abs=1000)
    assert row["host_wait_ns"] <= row["idle_ns"] and round(row["span_pct"], 1) == 75.9  # 501.1 of 660.6 ms
    (idle_row,) = trace.query("findings.gpu_idle").to_dicts()  # the same device's idle: findings.run tells it once
    assert idle_row["time_ns"] == row["idle_ns"] and round(row["idle_pct"], 1) == 76.2


@pytest.mark.slow  # test_breakdowns' synthetic trace and the orphans below hold a finding that must not fire too
def test_gpu_idle_fires_where_the_idle_is_not_host_wait(load_shared, shared_dir):
    """The finding that must NOT fire: on the H100 BERT trace every idle gap is host wait, so launch_bound says
    it and gpu_idle stays silent; on the same trace with the threshold out of reach neither fires."""
    trace = load_shared("tracelens/h100_bert-small_sdpa-flash.json.gz")
    ((span, idle, host),) = _device_idle_and_host_wait(
        _events(shared_dir / "tracelens/h100_bert-small_sdpa-flash.json.gz")
    ).values()
    assert host == pytest.approx(idle, abs=1000)
    ids = [f.id for f in findings.run(trace)]
    assert "launch_bound" in ids and "gpu_idle" not in ids
    assert trace.query("findings.launch_bound", {"min_host_wait_pct": 99.0}).to_dicts() == []


def test_cpu_bound_calls_are_per_module_class_not_per_instance(load_shared, shared_dir):
    """ViT's twelve ViTSdpaAttention layers: one row of 12 calls (not 12 rows of calls=1), its mean the
    headline's CPU time per call, the median beside it and the worst layer named as the worst."""
    trace = load_shared("tracelens/mi300_falconsai_vit_sdpa_modules.json.gz")
    scopes = [
        e
        for e in _events(shared_dir / "tracelens/mi300_falconsai_vit_sdpa_modules.json.gz")
        if e.get("cat") == "python_function" and e["name"].startswith("nn.Module: ViTSdpaAttention_")
    ]
    durations = [_ns(e["dur"]) for e in scopes]
    (row,) = trace.query("findings.cpu_bound_calls").to_dicts()
    assert (
        (row["op"], row["calls"])
        == ("nn.Module: ViTSdpaAttention", 12)
        == ("nn.Module: ViTSdpaAttention", len(durations))
    )
    assert row["cpu_ns_per_call"] == pytest.approx(statistics.mean(durations))  # 312.0 µs
    assert row["cpu_ns_median"] == pytest.approx(statistics.median(durations))  # 297.0 µs
    worst = max(scopes, key=lambda e: _ns(e["dur"]))
    assert row["worst_call"] == worst["name"] and row["worst_cpu_ns"] == _ns(worst["dur"])  # _0: 439.1 µs
    (headline,) = trace.query("headline").to_dicts()
    assert row["cpu_ns_per_call"] == pytest.approx(headline["cpu_ns_per_call"])


@pytest.mark.parametrize(
    ("variant", "finding", "match", "by_hand_ns"),
    [
        ("naive", "memcpy_in_attention", lambda e: e.get("cat") == "gpu_memcpy", 386_304),
        ("math", "fp32_simt_gemm", lambda e: e.get("cat") == "kernel" and "f32f32" in e["name"], 2_864_672),
        ("efficient", "dominant_kernel", lambda e: e.get("cat") == "kernel" and "fmha_cutlassF" in e["name"], None),
    ],
)
def test_finding_time_equals_the_raw_events(demo, variant, finding, match, by_hand_ns):
    total = sum(_ns(e["dur"]) for e in _events(H200 / f"{variant}.json.gz") if match(e))
    if by_hand_ns is not None:
        assert total == by_hand_ns
    (f,) = [f for f in findings.run(demo) if f.id == finding and f.trace == variant]
    assert f.explains_ns == pytest.approx(total, abs=10)
    span = next(r["span_ns"] for r in demo.query("gpu_timeline").to_dicts() if r["trace"] == variant)
    assert f.explains_pct == pytest.approx(100.0 * f.explains_ns / span)  # one base: the GPU span


def test_the_demo_tells_the_posts_story_first(demo):
    """make demo's report (--brief): the naive variant's hidden DtoD copy in the mask stage first, then FP32 SIMT
    math, then the fused kernels' speed-up; the whole output under 60 lines at 80 columns."""
    built = report.build([demo], names=["demo.duckdb"])
    groups = built.findings()
    assert [g.id for g in groups[:3]] == ["memcpy_in_attention", "fp32_simt_gemm", "fused_speedup"]
    assert groups[0].traces == ["naive"] and "Memcpy DtoD" in groups[0].members[0][1].message
    assert "stage mask" in groups[0].members[0][1].message
    assert groups[1].traces == ["math"]
    assert [g["id"] for g in built.to_dict()["findings"][:3]] == [g.id for g in groups[:3]]  # the JSON's order
    assert set(groups[2].traces) == {"efficient", "flash", "cudnn", "flex"}
    # Per call, by hand from the report's own headline: cudnn 58.2 µs against naive's 1,075.5 µs.
    head = {t.label: t.headline for t in built.traces}
    cudnn = next(f for label, f in groups[2].members if label == "cudnn")
    ratio = head["cudnn"]["gpu_ns_per_call"] / head["naive"]["gpu_ns_per_call"]
    assert f"({ratio:.2f}x)" in cudnn.message
    out = io.StringIO()
    built.print(Console(file=out, width=80, highlight=False), html_hint=False, brief=True)
    lines = out.getvalue().splitlines()
    assert len(lines) + 2 <= 60  # + the load line and "wrote PATH"
    assert "Memcpy ops launched inside an attention call: naive" in lines[2]


def test_a_rule_row_with_an_unknown_stage_is_an_error(tmp_path):
    """--rules files are checked against the stage vocabulary: a typo names the file, the row and the stage meant."""
    import duckdb

    from tracekit.errors import TracekitError
    from tracekit.model import rules

    (tmp_path / "op_stages.csv").write_text(
        "pattern,stage,call,impl,context,scope,causal_arg,note\n^aten::foo$,softmax,,,,,,\n^aten::bar$,softmaxx,,,,,,\n"
    )
    with pytest.raises(TracekitError, match=r"op_stages.csv:3: unknown stage 'softmaxx' \(did you mean 'softmax'\?"):
        rules.load(duckdb.connect(), [tmp_path])
    (tmp_path / "op_stages.csv").write_text(
        "pattern,stage,call,impl,context,scope,causal_arg,note\n^aten::foo$,rope,,,,,,\n"
    )
    assert "op_stages" in rules.load(duckdb.connect(), [tmp_path])  # a known stage loads


def test_zero_reported_occupancy_and_orphans_equal_the_raw_events(demo):
    """cuDNN's kernels launched by cuLaunchKernelEx all report 0 % occupancy (counted here from the raw JSON);
    the GPU ops whose launch is not in the trace are the orphans the finding lists (none: it must not fire)."""
    fired = findings.run(demo)
    seen = {"orphans": 0, "zero": 0}
    for variant in DEMO:
        events = _events(H200 / f"{variant}.json.gz")
        api = {
            e["args"]["correlation"]: e["name"]
            for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
        }
        gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"]
        orphans = [e for e in gpu if e["args"].get("correlation") not in api]
        (orphan,) = [f for f in fired if f.id == "orphan_gpu_ops" and f.trace == variant] or [None]
        assert (orphan.rows_total if orphan else 0) == len(orphans), variant
        seen["orphans"] += len(orphans)
        ex = [e for e in gpu if api.get(e["args"].get("correlation")) == "cuLaunchKernelEx"]
        zero = [f for f in fired if f.id == "zero_reported_occupancy" and f.trace == variant]
        if ex and all(e["args"].get("est. achieved occupancy %") == 0 for e in ex):
            assert f"cuLaunchKernelEx: {len(ex)}" in zero[0].message, variant
            seen["zero"] += 1
        else:
            assert not any("cuLaunchKernelEx" in f.message for f in zero), variant
    # Every GPU op of the H200 recordings has its launch in the trace (no orphan: the finding must not fire);
    # naive, inplace and cudnn launch with cuLaunchKernelEx, all at 0 %.
    assert seen == {"orphans": 0, "zero": 3}


def test_every_finding_quotes_one_percentage_base():
    """Messages quote times; the one percentage a line shows is the GPU span's (the header's), and only the
    per-device findings quote a share in their message, of that device's span (the same base on one GPU)."""
    import string

    for rule in findings.rules():
        specs = {spec for _, name, spec, _ in string.Formatter().parse(rule.message) if name and spec == "pct"}
        assert not specs or rule.id in ("launch_bound", "gpu_idle"), rule.id
