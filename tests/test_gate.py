"""The regression gate (tracekit diff --gate): verdicts, exit codes, Markdown and JSON, the baseline folder.

Pairs whose change is known: the H200 samples naive and inplace (an out-of-place masked_fill and its
hidden copy against masked_fill_: the mask stage per call is 35 % dearer in naive, nothing else moves);
auto and cudnn (the same SDPA call twice: torch chose cuDNN for auto), which must pass; and the inplace
sample with one stage slowed by construction (its softmax kernels' durations scaled in the JSON).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracekit import cli
from tracekit.analysis import gate
from tracekit.diff import Side

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "sample_traces" / "gpu_h200"


def test_student_t_without_scipy_matches_the_tables():
    # Two-sided p of Student's t and its 97.5 % quantile, from the printed tables.
    assert gate.t_two_sided_p(2.0, 10) == pytest.approx(0.073388, abs=1e-6)
    assert gate.t_two_sided_p(1.0, 1) == pytest.approx(0.5, abs=1e-12)
    assert gate.t_two_sided_p(2.776445, 4) == pytest.approx(0.05, abs=1e-6)
    assert gate.t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-5)
    assert gate.t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-5)
    # Welch: the degrees of freedom by Welch-Satterthwaite, checked by hand for two small samples.
    p, df, se = gate.welch([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0])
    sa, sb = 1.0 / 3, (20.0 / 3) / 4
    assert se == pytest.approx((sa + sb) ** 0.5)
    assert df == pytest.approx((sa + sb) ** 2 / (sa**2 / 2 + sb**2 / 3))
    assert p == pytest.approx(gate.t_two_sided_p(3.0 / se, df))


def test_rules_parse_and_refuse_what_they_cannot_mean():
    rule = gate.parse_rule("fused_attention.per_call>+5%")
    assert (rule.metric, rule.op, rule.limit, rule.unit) == ("fused_attention.per_call", ">", 5.0, "%")
    assert gate.parse_rule("step_gpu_time>+50us").limit == 50_000.0
    assert gate.parse_rule("attention_calls.tflops_per_s<-5%").limit == -5.0
    for bad in ("mask.per_call", "mask.per_call>>5%", "mask.per_call>+5 percent", ">5%"):
        with pytest.raises(gate.GateInputError, match="METRIC>CHANGE"):
            gate.parse_rule(bad)


def _gate(inputs, a: Path, b: Path, rules: list[str]) -> gate.GateResult:
    return gate.evaluate(Side(inputs.trace(a), name=a.name), Side(inputs.trace(b), name=b.name), rules)


def test_naive_against_inplace_fails_on_the_mask_and_only_there(inputs):
    rules = ["mask.per_call>+5%", "softmax.per_call>+5%", "attention.per_call>+5%", "memcpy_in_attention>+0"]
    worse = _gate(inputs, H200 / "inplace.json.gz", H200 / "naive.json.gz", rules)
    by = {v.metric: v for v in worse.verdicts}
    mask = by["mask.per_call"]
    # The calls' mask time, from the recording: 367,777 368,417 367,775 ns in inplace; 497,023 495,776
    # 496,671 ns in naive (masked_fill and its Memcpy DtoD).
    assert mask.a_mean == pytest.approx((367_777 + 368_417 + 367_775) / 3)
    assert mask.b_mean == pytest.approx((497_023 + 495_776 + 496_671) / 3)
    assert (mask.status, mask.significant, mask.a_n, mask.samples_of) == ("fail", True, 3, "calls")
    assert mask.change == pytest.approx(100 * (mask.b_mean - mask.a_mean) / mask.a_mean)
    assert 34 < mask.change < 36 and mask.noise < 1 and mask.p_value < 1e-6
    assert by["softmax.per_call"].status == "pass" and abs(by["softmax.per_call"].change) < 1
    assert by["attention.per_call"].status == "fail"
    assert (by["memcpy_in_attention"].status, by["memcpy_in_attention"].change) == ("fail", 3.0)
    assert worse.exit_code == 1
    better = _gate(inputs, H200 / "naive.json.gz", H200 / "inplace.json.gz", rules)
    assert [v.status for v in better.verdicts] == ["pass"] * 4 and better.exit_code == 0


def test_a_trace_against_itself_passes_with_no_change(inputs):
    same = _gate(inputs, H200 / "naive.json.gz", H200 / "naive.json.gz", ["mask.per_call>+0%", "step_time>+0%"])
    assert [(v.status, v.change, v.p_value) for v in same.verdicts] == [("pass", 0.0, 1.0)] * 2


@pytest.mark.slow
def test_the_same_call_recorded_twice_passes(inputs):
    rules = ["fused_attention.per_call>+1%", "attention.per_step>+1%", "step_gpu_time>+1%", "attention.share>+2pt"]
    result = _gate(inputs, H200 / "auto.json.gz", H200 / "cudnn.json.gz", rules)
    assert result.exit_code == 0, result.to_markdown()
    assert all(abs(v.change) < 1 for v in result.verdicts)


def _slowed(factor_per_call: list[float]) -> bytes:
    """The inplace sample with the softmax kernel of call i lasting factor_per_call[i] times as long."""
    doc = json.loads(gzip.decompress((H200 / "inplace.json.gz").read_bytes()))
    softmax = sorted(
        (e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "softmax_warp_forward" in e["name"]),
        key=lambda e: e["ts"],
    )
    assert len(softmax) == len(factor_per_call)
    for event, factor in zip(softmax, factor_per_call, strict=True):
        event["dur"] = round(event["dur"] * factor, 3)
    return json.dumps(doc).encode()


def test_a_stage_slowed_by_construction_fails(inputs):
    base = H200 / "inplace.json.gz"
    slowed = inputs.file(_slowed([1.10, 1.10, 1.10]), "softmax_slowed.json.gz")
    result = _gate(inputs, base, slowed, ["softmax.per_call>+5%", "mask.per_call>+5%", "qk_matmul.per_call>+5%"])
    softmax, mask, qk = result.verdicts
    assert softmax.status == "fail" and softmax.change == pytest.approx(10.0, abs=0.01)
    assert (mask.status, mask.change, qk.status, qk.change) == ("pass", 0.0, "pass", 0.0)
    within = _gate(inputs, base, slowed, ["softmax.per_call>+12%"])
    assert within.verdicts[0].status == "pass" and not within.verdicts[0].beyond_limit


@pytest.mark.slow
def test_a_slowdown_inside_the_calls_spread_is_not_significant(inputs):
    base = H200 / "inplace.json.gz"
    # One call in three 30 % slower: a mean change of +10 %, but inside the spread of the calls.
    spread = inputs.file(_slowed([1.0, 1.30, 1.0]), "softmax_one_slow_call.json.gz")
    noisy = _gate(inputs, base, spread, ["softmax.per_call>+5%"]).verdicts[0]
    assert noisy.change == pytest.approx(10.0, abs=0.05) and noisy.beyond_limit
    assert (noisy.status, noisy.significant) == ("pass", False) and noisy.p_value > 0.05


def _run(monkeypatch, inputs, capsys, *args) -> tuple[int, str, str]:
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(inputs.cache))
    code = cli.main(["diff", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _markdown_table(text: str) -> list[dict]:
    """The rows of the one Markdown table in ``text``, by the header's names (a GFM table: a header row, a
    delimiter row of dashes, body rows, each with the same number of cells)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    header, rule, body = cells[0], cells[1], cells[2:]
    assert all(set(c) <= set("-:") and c for c in rule) and len(rule) == len(header)
    assert all(len(row) == len(header) for row in body)
    return [dict(zip(header, row, strict=True)) for row in body]


def test_cli_exit_codes_markdown_and_json(monkeypatch, inputs, capsys, tmp_path):
    naive, inplace = H200 / "naive.json.gz", H200 / "inplace.json.gz"
    code, out, _ = _run(
        monkeypatch, inputs, capsys, inplace, naive, "--gate", "mask.per_call>+5%", "--gate", "softmax.per_call>+5%"
    )
    assert code == 1
    rows = _markdown_table(out)
    assert [(r["verdict"], r["rule"]) for r in rows] == [
        ("**fail**", "`mask.per_call>+5%`"),
        ("pass", "`softmax.per_call>+5%`"),
    ]
    assert rows[0]["samples"] == "3 / 3 calls" and rows[0]["change"].startswith("+34.")
    assert out.startswith("### tracekit gate: FAIL (1 of 2 rules failed)")
    code, out, _ = _run(
        monkeypatch, inputs, capsys, naive, inplace, "--gate", "mask.per_call>+5%", "--gate-format", "json"
    )
    doc = json.loads(out)
    assert (code, doc["verdict"], doc["exit_code"], doc["test"]) == (0, "pass", 0, "welch_t")
    written = tmp_path / "verdict.md"
    code, out, _ = _run(monkeypatch, inputs, capsys, inplace, naive, "--gate", "mask.per_call>+5%", "-o", written)
    assert (code, out) == (1, "") and _markdown_table(written.read_text())[0]["verdict"] == "**fail**"
    assert doc["rules"][0]["status"] == "pass" and doc["rules"][0]["change"] < -25
    for args in (
        (naive, inplace, "--gate", "mask.per_call=5%"),  # not a rule
        (naive, inplace, "--gate", "nosuch.per_call>+5%"),  # no such metric
        (naive, inplace, "--gate", "step_time>+2pt"),  # pt on a duration
        (naive, ROOT / "missing.json.gz", "--gate", "step_time>+3%"),  # no such file
        (naive, "--gate", "step_time>+3%"),  # one SOURCE without --baseline
    ):
        code, out, err = _run(monkeypatch, inputs, capsys, *args)
        assert (code, out) == (2, ""), args
        assert err.startswith("Error: ") and err.count("\n") == 1, err


def test_baseline_folder_seeds_compares_and_moves_on_pass_only(monkeypatch, inputs, capsys, tmp_path):
    folder = tmp_path / "nightly"
    naive, inplace = H200 / "naive.json.gz", H200 / "inplace.json.gz"
    rule = ("--gate", "mask.per_call>+5%")
    code, _, err = _run(monkeypatch, inputs, capsys, "--baseline", folder, inplace, *rule)
    assert code == 2 and "no baseline stored yet" in err
    code, _, _ = _run(monkeypatch, inputs, capsys, "--baseline", folder, inplace, *rule, "--update-baseline")
    manifest = json.loads((folder / "baseline.json").read_text())
    assert code == 0 and manifest["source"] == "inplace.json.gz" and manifest["verdict"] is None
    assert (folder / "trace" / "inplace.json.gz").read_bytes() == inplace.read_bytes()
    # A regression: exit 1, the baseline stays.
    code, out, _ = _run(monkeypatch, inputs, capsys, "--baseline", folder, naive, *rule, "--update-baseline")
    assert code == 1 and "**fail**" in out
    assert json.loads((folder / "baseline.json").read_text())["source"] == "inplace.json.gz"
    # A pass: the new run becomes the baseline, and the manifest says what it replaced.
    code, _, _ = _run(monkeypatch, inputs, capsys, "--baseline", folder, inplace, *rule, "--update-baseline")
    manifest = json.loads((folder / "baseline.json").read_text())
    assert code == 0 and manifest["verdict"] == "pass" and manifest["rules"] == ["mask.per_call>+5%"]
    assert manifest["replaced"]["source"] == "inplace.json.gz"
    assert sorted(p.name for p in folder.iterdir()) == ["baseline.json", "trace"]
