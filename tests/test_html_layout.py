"""The HTML report in headless Chromium at 1400 px, with 1 and 5 traces: nothing overflows
the page width, every plot label is inside its plot, long labels keep their full text as a
tooltip. A copy of the page gets a measuring script (the report itself has none) that logs
its findings to the console, which the browser log carries back.
"""

import re
import shutil
from pathlib import Path

import pytest
from test_report import _browser, _chromium, _console_lines

from tracekit.analysis import report

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "gpu_a100_synthetic"
# Long, realistic names (the post's trace naming: {batch}_{heads}_{seq}_{head_dim}_{backend}_{mode}).
LONG = "8_16_1024_64_{}_eager_a100-sxm4-80gb_run_2026-12-03T07-41-00"

MEASURE = """<script>
const W = document.documentElement.clientWidth;
const out = {page: document.documentElement.scrollWidth, width: W, wide: [], clipped: [], untitled: 0};
for (const el of document.querySelectorAll("table, svg, pre, p, h1, h2, h3, li")) {
  if (el.closest(".scroll")) continue;  // a scrolling box may hold wider content
  const r = el.getBoundingClientRect();
  if (r.right > W + 1) out.wide.push(el.tagName + "." + (el.getAttribute("class") || "") + ":" + Math.round(r.right));
}
out.scrolled = [];
for (const box of document.querySelectorAll(".scroll")) {
  const r = box.getBoundingClientRect();
  if (r.right > W + 1) out.wide.push("scroll:" + Math.round(r.right));
  const t = box.querySelector("table");  // a table with one column per trace fits without scrolling
  if (t && /\b(headline|breakdown)\b/.test(t.className) && box.scrollWidth > box.clientWidth + 1)
    out.scrolled.push(t.className + ":" + box.scrollWidth);
}
for (const t of document.querySelectorAll("svg.plot text")) {
  const b = t.getBoundingClientRect(), s = t.ownerSVGElement.getBoundingClientRect();
  const own = Array.from(t.childNodes).filter(n => n.nodeType === 3).map(n => n.textContent).join("");
  if (b.left < s.left - 0.5 || b.right > s.right + 0.5) out.clipped.push(own + ":" + Math.round(b.left - s.left));
  if (own.includes("\\u2026") && !t.querySelector("title")) out.untitled += 1;
}
console.log("TRACEKIT-LAYOUT " + JSON.stringify(out));
</script></body></html>"""


def _variants(tmp: Path, names: list[str]) -> list[Path]:
    out = []
    for n in names:
        p = tmp / f"{LONG.format(n)}.json.gz"
        shutil.copy(SAMPLES / f"{n}.json.gz", p)
        out.append(p)
    return out


@pytest.mark.parametrize("variants", [["flash"], ["naive", "inplace", "math", "flash", "cudnn"]], ids=["1", "5"])
def test_report_fits_1400px(tmp_path, variants):
    browser = _browser()
    rep = report.build(_variants(tmp_path, variants))
    page = tmp_path / "measured.html"
    page.write_text(rep.to_html().replace("</body></html>", MEASURE), encoding="utf-8")
    url = page.resolve().as_uri()
    run = _chromium(browser, tmp_path, url, "--dump-dom", "--window-size=1400,1000")
    assert run.returncode == 0, run.stderr[-2000:]
    logged = [ln for ln in _console_lines(run.stderr, url) if "TRACEKIT-LAYOUT" in ln]
    assert len(logged) == 1, run.stderr[-2000:]
    import json

    m = json.loads(re.search(r"TRACEKIT-LAYOUT (\{.*\})", logged[0]).group(1))
    assert m["width"] >= 1380, m
    assert m["page"] <= m["width"], m  # no horizontal scrolling of the page
    assert m["wide"] == [], m
    assert m["clipped"] == [], m
    assert m["untitled"] == 0, m
    assert m["scrolled"] == [], m  # the per-trace tables wrap (past 4 traces: fixed layout) instead of scrolling

    shot = tmp_path / "report.png"
    run = _chromium(browser, tmp_path, rep_path(tmp_path, rep), f"--screenshot={shot}", "--window-size=1400,1400")
    assert run.returncode == 0 and shot.stat().st_size > 10_000
    png = shot.read_bytes()
    # A PNG of the window: signature, then the IHDR chunk's width and height (big-endian).
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (1400, 1400)


def rep_path(tmp: Path, rep) -> str:
    p = tmp / "report.html"
    p.write_text(rep.to_html(), encoding="utf-8")
    return p.resolve().as_uri()
