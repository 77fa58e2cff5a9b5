"""tracekit report and tracekit diff on the post's six variants (tests/synthetic.py).

The numbers are read back from what the user gets (the JSON, the HTML's
data-value attributes and visible text, the terminal output) and compared
with the named queries run independently and with the synthetic ground truth.

The HTML is also rendered by headless Chromium (Debian's ``chromium``): a
screenshot that must not be blank, the DOM (the plots' SVG elements must be
there) and the browser log. Chromium started with ``--enable-logging=stderr
--v=0`` writes every console message of the page (console.error, uncaught
exceptions, ...) to stderr as an ``INFO:CONSOLE...`` line, whatever the
message's level, so the test asserts there is no such line for the report at
all (stricter than "no ERROR"); a control page that calls console.error
proves the capture works. The page loads no resources (checked statically:
no script, every href a fragment or data: URI). The Chromium test skips only
when Chromium is absent and ``apt-get install -y chromium`` fails
(TRACEKIT_REQUIRE_BROWSER=1 turns the skip into a failure).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from synthetic import post_variants

import tracekit
from tracekit import diff
from tracekit.analysis import findings, report
from tracekit.analysis.report_render import fmt
from tracekit.cli import cli, main

ORDER = ("inplace", "naive", "math", "efficient", "flash", "cudnn")


@pytest.fixture(scope="module")
def variants(inputs):
    """name -> (trace path, truth) for the post's six variants (the session's files: ``inputs``)."""
    return {name: (inputs.file(v, f"{name}.json.gz"), v.truth) for name, v in post_variants().items()}


@pytest.fixture(scope="module")
def made(variants, tmp_path_factory):
    """The CLI's report over all six (inplace first): terminal text, HTML and JSON."""
    d = tmp_path_factory.mktemp("report")
    html_path, json_path = d / "report.html", d / "report.json"
    args = ["report", *[str(variants[n][0]) for n in ORDER], "--html", str(html_path), "--json", str(json_path)]
    env = {"COLUMNS": "100", "TRACEKIT_CACHE_DIR": str(d / "cache")}
    result = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return {
        "terminal": result.stdout,
        "stderr": result.stderr,
        "html_path": html_path,
        "html": html_path.read_text(encoding="utf-8"),
        "json": json.loads(json_path.read_text()),
    }


@pytest.fixture(scope="module")
def loaded(variants, inputs):
    """name -> Trace, loaded independently of the report (once per session, shared: read only)."""
    return {n: inputs.trace(variants[n][0]) for n in ORDER}


class _Page(HTMLParser):
    """What the tests read from the HTML: headline cells, ids, links, findings, plots."""

    def __init__(self):
        super().__init__()
        self.cells: dict[tuple[str, str], dict] = {}
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.findings: list[dict] = []
        self.evidence: dict[str, int] = {}
        self.tags: list[tuple[str, dict]] = []
        self._cell = None
        self._table = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "id" in a:
            self.ids.add(a["id"])
        if "href" in a:
            self.hrefs.append(a["href"])
        if "src" in a:
            self.srcs.append(a["src"])
        if tag == "td" and "data-key" in a and "data-trace" in a:
            self._cell = {**a, "text": ""}
            self.cells[(a["data-trace"], a["data-key"])] = self._cell
        if tag == "li" and "data-finding" in a:
            self.findings.append({**a, "links": []})
        if tag == "a" and self.findings and "href" in a:
            self.findings[-1]["links"].append(a["href"])
        if tag == "table" and "data-finding" in a:
            self._table = (a["data-trace"], a["data-finding"])
            self.evidence[self._table] = 0
        if tag == "tr" and self._table is not None:
            self.evidence[self._table] += 1

    def handle_endtag(self, tag):
        if tag == "td":
            self._cell = None
        if tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data


def page(html: str) -> _Page:
    p = _Page()
    p.feed(html)
    return p


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _weighted(rows, col):
    rows = [r for r in rows if r[col] is not None and r["total_ns"]]
    total = sum(r["total_ns"] for r in rows)
    return sum(r[col] * r["total_ns"] for r in rows) / total if total else None


def expected_headline(trace) -> dict:
    """The headline numbers recomputed from the named queries."""
    calls = trace.query("attention_calls").to_dicts()
    impls = [c["impl"] for c in calls]
    timeline = trace.query("gpu_timeline").to_dicts()[0]
    precision = {r["precision"]: r["share_pct"] for r in trace.query("kernel_precision").to_dicts()}
    apis = sorted(trace.query("launch_api").to_dicts(), key=lambda r: (-r["gpu_ns"], r["api"]))
    occ = trace.query("occupancy").to_dicts()
    return {
        "impl": max(sorted(set(impls)), key=impls.count),
        "attention_calls": len(calls),
        "gpu_ns_per_call": _mean(c["gpu_ns"] for c in calls),
        "attention_kernel_ns_per_call": _mean(c["attention_kernel_ns"] for c in calls),
        "cpu_ns_per_call": _mean(c["cpu_ns"] for c in calls),
        "gpu_ops_per_call": _mean(c["gpu_ops"] for c in calls),
        "tflops_per_s": _mean(c["tflops_per_s"] for c in calls),
        "tensor_core_pct": precision.get("tensor_core", 0.0),
        "launch_api": apis[0]["api"],
        "reported_occupancy_pct": _weighted(occ, "reported_occupancy_pct"),
        "theoretical_occupancy_pct": _weighted(occ, "theoretical_occupancy_pct"),
        "idle_pct": 100.0 * timeline["idle_ns"] / timeline["span_ns"],
        "stage_share_pct": {
            r["stage"]: r["share_pct"] for r in trace.query("stage_breakdown").to_dicts() if r["gpu_ops"]
        },
    }


def test_headline_numbers_are_the_query_results(made, loaded):
    by_label = {t["label"]: t for t in made["json"]["traces"]}
    assert list(by_label) == list(ORDER)
    cells = page(made["html"]).cells
    units = {m["key"]: m["unit"] for m in made["json"]["metrics"]}
    for name in ORDER:
        want = expected_headline(loaded[name])
        got = by_label[name]["headline"]
        for key, value in want.items():
            if isinstance(value, float):
                assert got[key] == pytest.approx(value, rel=1e-12), (name, key)
            else:
                assert got[key] == value, (name, key)
        # The HTML shows the same numbers: exactly in data-value, formatted in the text (the backward
        # rows only for training traces: these forward-only variants have none).
        assert got["backward_calls"] == 0
        for key, unit in units.items():
            if key.startswith("backward_"):
                assert (name, key) not in cells
                continue
            cell = cells[(name, key)]
            v = got[key]
            assert cell["data-value"] == ("" if v is None else repr(v) if isinstance(v, float) else str(v)), (name, key)
            assert cell["text"] == fmt(v, unit), (name, key)
        for stage, share in want["stage_share_pct"].items():
            cell = cells[(name, f"stage_share_pct.{stage}")]
            assert float(cell["data-value"]) == share and cell["text"] == f"{share:.1f} %"


def test_the_posts_comparison_reads_right(made, variants):
    by_label = {t["label"]: t["headline"] for t in made["json"]["traces"]}
    truth = {n: variants[n][1]["regions"][variants[n][1]["region"]] for n in ORDER}
    for n in ORDER:  # op-level GPU time per call is the region's "CUDA time avg"
        assert by_label[n]["gpu_ns_per_call"] == pytest.approx(truth[n]["gpu_time_avg_ns"])
        assert by_label[n]["cpu_ns_per_call"] == pytest.approx(truth[n]["cpu_time_avg_ns"])
        assert by_label[n]["gpu_ops_per_call"] == variants[n][1]["gpu_ops_per_forward"]
    ratio = truth["math"]["gpu_time_avg_ns"] / truth["inplace"]["gpu_time_avg_ns"]
    assert round(ratio, 1) == 3.7
    assert by_label["math"]["gpu_vs_first"] == pytest.approx(ratio)
    cells = page(made["html"]).cells
    assert cells[("math", "gpu_vs_first")]["text"] == "3.70x"
    assert cells[("flash", "gpu_ns_per_call")]["text"] == "146.8 µs"
    assert cells[("cudnn", "gpu_ns_per_call")]["text"] == "186.3 µs"
    assert cells[("inplace", "gpu_ns_per_call")]["text"] == "1,955.0 µs"
    assert cells[("math", "gpu_ns_per_call")]["text"] == "7,239.0 µs"
    # cuDNN: CUPTI says 0 %, the launch configuration allows 12.5 %; flash ~13 % by design.
    assert by_label["cudnn"]["reported_occupancy_pct"] == 0
    assert by_label["cudnn"]["theoretical_occupancy_pct"] == pytest.approx(12.5)
    assert by_label["cudnn"]["launch_api"] == "cuLaunchKernelEx"
    assert by_label["flash"]["reported_occupancy_pct"] == 13
    assert by_label["math"]["tensor_core_pct"] == 0 and by_label["flash"]["tensor_core_pct"] == 100


def test_findings_fire_where_they_should_and_only_there(made, variants):
    fired = {(f["trace"], f["id"]) for t in made["json"]["traces"] for f in t["findings"]}
    assert ("naive", "memcpy_in_attention") in fired
    assert ("math", "fp32_simt_gemm") in fired
    assert ("cudnn", "zero_reported_occupancy") in fired
    for n in ORDER:
        assert (n, "orphan_gpu_ops") in fired
    assert {t for t, f in fired if f == "memcpy_in_attention"} == {"naive"}  # not inplace, not flash
    assert {t for t, f in fired if f == "fp32_simt_gemm"} == {"math"}
    # math has a 1-block kernel reporting 0 % too, but its launch API reports occupancy otherwise.
    assert {t for t, f in fired if f == "zero_reported_occupancy"} == {"cudnn"}
    # The evidence rows are the truth: naive's three hidden copies, every variant's orphan.
    by = {(f["trace"], f["id"]): f for t in made["json"]["traces"] for f in t["findings"]}
    naive = variants["naive"][1]
    copies = sorted(g["dur_ns"] for g in naive["gpu_ops"] if g["kind"] == "memcpy" and not g["orphan"])
    memcpy = by[("naive", "memcpy_in_attention")]
    assert sorted(r["dur_ns"] for r in memcpy["rows"]) == copies and len(copies) == 3
    assert {r["deciding_op"] for r in memcpy["rows"]} == {"aten::masked_fill"}
    for n in ORDER:
        assert by[(n, "orphan_gpu_ops")]["rows_total"] == variants[n][1]["orphans"] == 1


def test_findings_link_to_their_rows(made, loaded):
    p = page(made["html"])
    assert p.findings, "no finding in the HTML"
    for f in p.findings:
        anchors = [h for h in f["links"] if h.startswith("#")]
        assert len(anchors) == 1 and anchors[0][1:] in p.ids, f
        rows = p.evidence[(f["data-trace"], f["data-finding"])] - 1  # minus the header row
        want = [r for r in loaded[f["data-trace"]].query(f"findings.{f['data-finding']}").to_dicts()]
        assert rows == min(len(want), findings.MAX_ROWS) and rows > 0
    # In the terminal: the query to run for the rows.
    assert "tracekit query findings.memcpy_in_attention " in made["terminal"]
    assert "tracekit query findings.zero_reported_occupancy " in made["terminal"]


def test_terminal_report_fits_100_columns(made):
    lines = made["terminal"].splitlines()
    # The rows: hints are one line each, never wrapped (they are pasted whole); the rest fits.
    assert max(len(line) for line in lines if not line.lstrip().startswith("rows: tracekit ")) <= 100
    # (a query's rows, or the diff a comparison finding reads: tracekit diff A B --per-call)
    hints = [line.strip() for line in lines if line.lstrip().startswith("rows: ")]
    assert hints and all(h.endswith((".json.gz", ".json.gz --per-call")) for h in hints), hints
    text = made["terminal"]
    for needle in (
        "146.8 µs",
        "186.3 µs",
        "3.70x",
        "cuLaunchKernelEx",
        "What stands out",
        "math vs inplace, by stage (per attention call; tracekit diff)",
    ):
        assert needle in text, needle
    assert "\x1b[" not in text  # no colour codes when piped
    assert "\r" not in made["stderr"]  # no progress when piped


def test_json_comparison_is_tracekit_diff(made, variants):
    comparison = made["json"]["comparison"]
    assert comparison["against"] == "inplace" and comparison["per_call"] is True
    result = CliRunner().invoke(
        cli,
        ["diff", str(variants["inplace"][0]), str(variants["math"][0]), "--per-call", "-f", "json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0
    assert comparison["tables"]["math"] == json.loads(result.stdout)
    assert '<table class="diff" data-trace="math">' in made["html"]


def test_diff_by_stage_and_kernel_against_the_truth(variants):
    inplace, math = variants["inplace"][1], variants["math"][1]
    result = CliRunner().invoke(
        cli, ["diff", str(variants["inplace"][0]), str(variants["math"][0]), "-f", "json"], catch_exceptions=False
    )
    rows = json.loads(result.stdout)
    assert result.exit_code == 0
    by_stage = {r["stage"]: r for r in rows}
    for stage in set(inplace["stage_ns"]) | set(math["stage_ns"]):
        a, b = inplace["stage_ns"].get(stage, 0), math["stage_ns"].get(stage, 0)
        r = by_stage[stage]
        assert (r["a_ns"], r["b_ns"], r["delta_ns"]) == (a, b, b - a), stage
        assert r["change"] == ("added" if not a else "removed" if not b else "slower" if b > a else "faster")
    impacts = [abs(r["delta_ns"]) for r in rows]
    assert impacts == sorted(impacts, reverse=True)
    assert by_stage["layout"]["change"] == "added" and by_stage["layout"]["delta_pct"] is None

    result = CliRunner().invoke(
        cli,
        ["diff", str(variants["inplace"][0]), str(variants["math"][0]), "--by", "kernel", "-f", "csv"],
        catch_exceptions=False,
    )
    lines = result.stdout.splitlines()
    assert lines[0] == "name,change,a_gpu_ops,b_gpu_ops,a_ns,b_ns,delta_ns,delta_pct,ratio"
    change = {line.split(",")[0]: line.split(",")[1] for line in lines[1:] if not line.startswith('"')}
    assert change["ampere_sgemm_128x64_tn"] == "added" and change["ampere_sgemm_128x64_nn"] == "added"
    assert change["ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn"] == "removed"


def test_diff_matches_by_stage_across_devices(load_shared):
    h100 = load_shared("tracelens/h100_bert-small_sdpa-flash.json.gz")
    mi300 = load_shared("tracelens/mi300_bert-small_sdpa-flash.json.gz")
    by_stage = {r["stage"]: r for r in diff.compare(h100, mi300).to_pylist()}
    fused = by_stage["fused_attention"]
    assert fused["a_gpu_ops"] == fused["b_gpu_ops"] == 4 and fused["change"] in ("slower", "faster")
    by_kernel = diff.compare(h100, mi300, by="kernel").to_pylist()
    h100_names = {r["name"] for r in h100.query("top_kernels", limit=0).to_dicts()}
    for r in by_kernel:  # a name on one side only is added or removed
        if r["a_gpu_ops"] and r["b_gpu_ops"]:
            assert r["change"] in ("slower", "faster", "same")
        elif r["a_gpu_ops"]:
            assert r["change"] == "removed" and r["name"] in h100_names
        else:
            assert r["change"] == "added" and r["name"] not in h100_names
    assert any(r["change"] == "added" for r in by_kernel) and any(r["change"] == "removed" for r in by_kernel)


def test_diff_per_call_without_calls_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "tiny.json"
    path.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "kernel",
                        "name": "gemm",
                        "pid": 0,
                        "tid": 7,
                        "ts": 104.0,
                        "dur": 3.5,
                        "args": {"correlation": 5, "stream": 7, "device": 0},
                    }
                ]
            }
        )
    )
    assert main(["diff", str(path), str(path), "--per-call"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "has no attention calls" in err and err.count("\n") == 1


def test_python_api_twin(variants, made):
    traces = [tracekit.load(variants[n][0]) for n in ("flash", "cudnn")]
    try:
        rep = report.build(traces)
    finally:
        for t in traces:
            t.close()
    assert [t.label for t in rep.traces] == ["flash", "cudnn"]
    cli_json = {t["label"]: t["headline"] for t in made["json"]["traces"]}
    for t in rep.traces:
        want = {**cli_json[t.label], "gpu_vs_first": t.headline["gpu_vs_first"]}
        assert t.headline == want
    assert rep.traces[1].headline["gpu_vs_first"] == pytest.approx(186304 / 146816)
    assert rep.to_html().startswith("<!DOCTYPE html>")
    assert json.loads(rep.to_json())["comparison"]["against"] == "flash"


def test_report_progress_shows_on_a_terminal_only(monkeypatch):
    import io

    from tracekit.present.console import Steps as _Steps

    class Tty(io.StringIO):
        def isatty(self):
            return True

    for tty, shown in ((True, True), (False, False)):
        err = Tty() if tty else io.StringIO()
        monkeypatch.setattr("sys.stderr", err)
        steps = _Steps(True, "report")
        steps(3, 10, "occupancy")
        steps.close()
        assert ("report: 3/10 occupancy" in err.getvalue()) is shown


def test_every_finding_has_a_query_and_a_row():
    rules = findings.rules()
    assert {r.id for r in rules} == {
        "memcpy_in_attention",
        "fp32_simt_gemm",
        "zero_reported_occupancy",
        "cpu_bound_calls",
        "orphan_gpu_ops",
        "gpu_idle",
        "launch_bound",
        "dominant_kernel",
        "attention_missed",
        "collective_bandwidth_low",
    }
    for r in rules:
        assert r.severity in findings.SEVERITIES and r.title and not r.title.endswith(".")
    assert (
        findings.message(
            "{rows} op(s), {sum_dur_ns:us}, {name:short}",
            [{"name": "k" * 80, "dur_ns": 1500}, {"name": "x", "dur_ns": 500}],
        )
        == "2 op(s), 2.0 µs, " + "k" * 30 + "…" + "k" * 29  # cut in the middle (tracekit.names.shorten)
    )
    with pytest.raises(tracekit.TracekitError, match="cannot be filled"):
        findings.message("{missing}", [{"a": 1}])


# ---- the HTML in a real browser -------------------------------------------------------


def test_html_is_self_contained(made):
    html = made["html"]
    p = page(html)
    assert "<script" not in html.lower()
    assert all(h.startswith(("#", "data:")) for h in p.hrefs), p.hrefs
    assert not p.srcs
    assert not re.search(r"url\(", html)  # no CSS fetches either
    assert html.count('<svg class="plot plot-') >= 4


def _browser() -> str:
    """Chromium's path; installs Debian's package when missing; skips (with why) when that fails."""
    found = os.environ.get("TRACEKIT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    why = "apt-get is not available"
    if shutil.which("apt-get"):
        for cmd in (
            ["apt-get", "install", "-y", "chromium"],
            ["apt-get", "update"],
            ["apt-get", "install", "-y", "chromium"],
        ):
            try:
                run = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                why = f"{' '.join(cmd)}: {exc}"
                continue
            why = f"{' '.join(cmd)} exited {run.returncode}: {(run.stderr or run.stdout).strip()[-200:]}"
            if shutil.which("chromium"):
                return shutil.which("chromium")
    reason = f"Chromium is absent and could not be installed ({why})"
    if os.environ.get("TRACEKIT_REQUIRE_BROWSER") == "1":
        pytest.fail(reason + " (TRACEKIT_REQUIRE_BROWSER=1)")
    pytest.skip(reason)


def _chromium(browser: str, tmp: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile{len(list(tmp.glob('profile*')))}"
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *extra,
        url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


def _console_lines(stderr: str, url: str) -> list[str]:
    """The browser log's console messages from the page at ``url``."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line and url in line]


def _png_pixels(path: Path) -> tuple[int, int, int, list[bytearray]]:
    """Width, height, channels and unfiltered scanlines of an 8-bit RGB/RGBA PNG (stdlib only)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6), (depth, color)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        if kind == 1:
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 255
        elif kind == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif kind == 3:
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b, c = prev[i], prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, channels, rows


def test_html_renders_in_headless_chromium(made, tmp_path):
    browser = _browser()
    url = made["html_path"].resolve().as_uri()

    # The log capture works: a page that logs an error is caught.
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><html><body><script>console.error("tracekit-control")</script></body></html>')
    logged = _chromium(browser, tmp_path, control.resolve().as_uri(), "--dump-dom")
    assert any("tracekit-control" in line for line in _console_lines(logged.stderr, control.resolve().as_uri()))

    shot = tmp_path / "report.png"
    run = _chromium(browser, tmp_path, url, f"--screenshot={shot}", "--window-size=1280,2000")
    assert run.returncode == 0, run.stderr[-2000:]
    assert _console_lines(run.stderr, url) == []
    width, height, channels, rows = _png_pixels(shot)
    assert (width, height) == (1280, 2000)
    lum = [
        (r[i] * 299 + r[i + 1] * 587 + r[i + 2] * 114) // 1000
        for r in rows[::8]
        for i in range(0, width * channels, 8 * channels)
    ]
    mean = sum(lum) / len(lum)
    variance = sum((v - mean) ** 2 for v in lum) / len(lum)
    colours = {bytes(r[i : i + 3]) for r in rows[::8] for i in range(0, width * channels, 8 * channels)}
    assert variance > 100 and len(colours) > 20, (variance, len(colours))

    dom = _chromium(browser, tmp_path, url, "--dump-dom")
    assert dom.returncode == 0 and _console_lines(dom.stderr, url) == []
    p = page(dom.stdout)
    svgs = [a.get("class", "") for tag, a in p.tags if tag == "svg"]
    assert svgs.count("plot plot-stages") == 1
    assert svgs.count("plot plot-timeline") == len(ORDER)
    assert svgs.count("plot plot-steps") == 1
    assert svgs.count("plot plot-roofline") == 1
    drawn = sum(1 for tag, a in p.tags if tag == "rect" and a.get("class") == "op")
    assert drawn == sum(len(t["timeline"]) for t in made["json"]["traces"])
    points = sum(1 for t in made["json"]["traces"] for c in t["calls"] if c["flops"])
    assert sum(1 for tag, a in p.tags if tag == "circle" and a.get("class") == "pt") == points + sum(
        len(t["steps"]) for t in made["json"]["traces"]
    )
    assert p.cells[("flash", "gpu_ns_per_call")]["text"] == "146.8 µs"  # the browser's DOM, not our string


def test_terminal_top_ops_name_their_category(load_shared, shared_dir):
    """A graph replay's kernels have no CPU op: op_summary's rows are (op, category), so the terminal
    line names the category, as the HTML list does, not "(no CPU op)" once per category."""
    rel = "tracelens/mi300_sglang_qwen3-8b_decode_hipgraph.json.gz"
    result = CliRunner().invoke(cli, ["report", str(shared_dir / rel)], catch_exceptions=False)
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())  # the terminal wraps long lines
    ops = text.split("top ops: ", 1)[1]
    top = load_shared(rel).query("op_summary").to_dicts()[:2]
    for r in top:
        assert f"{r['op']} ({r['category']}) " in ops
    assert top[0]["op"] == top[1]["op"] == "(no CPU op)" and top[0]["category"] != top[1]["category"]


def test_html_lists_each_finding_once_with_the_traces_it_holds_for(made):
    """As the terminal does: orphan_gpu_ops fires for all six variants and is one entry naming them, the heaviest
    trace's line first and the other five below it, each still linked to its own evidence."""
    html = made["html"]
    items = re.findall(r'<li class="finding [a-z]+" data-finding="orphan_gpu_ops"', html)
    assert len(items) == len(ORDER)  # one line per trace (each with its evidence), in one entry
    start = html.index('data-finding="orphan_gpu_ops"')
    head = html[start : html.index("<br>", start)]
    assert all(f"{name}" in head for name in ORDER)  # the group's title line names every trace
    assert html.count('<ul class="also">') >= 1
