"""Every example in the README runs on the shipped samples and prints what it says it prints.

Each shell example's output is checked against facts read without tracekit where the samples hold them:
the raw JSON of sample_traces/gpu_h200 (events, GPU ops, busy time, profiler steps, top kernels) and the
profiler's own ``key_averages()`` figures recorded beside each trace; every ``tracekit query`` table also
against the Python API's rows for the same query on the same source.
"""

import csv
import gzip
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest

import tracekit
from tracekit.library import queries

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```(sh|python)\n(.*?)```", re.S)


def _blocks():
    return [(lang, body) for lang, body in BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))]


def _commands():
    out = []
    for lang, body in _blocks():
        if lang != "sh":
            continue
        for line in body.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line and not line.startswith(("make ", "#", "pip ")):
                out.append(line)
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A scratch root holding a copy of the samples, so examples write nothing into the checkout."""
    root = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "sample_traces" / "gpu_h200", root / "sample_traces" / "gpu_h200")
    return root


def _env(tmp):
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TRACEKIT_CACHE_DIR"] = str(tmp / "cache")
    env["COLUMNS"] = "100"
    return env


def test_readme_has_examples():
    cmds = _commands()
    assert sum(c.startswith("tracekit ") for c in cmds) >= 10
    assert any(lang == "python" for lang, _ in _blocks())


GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
FOOTER = re.compile(r"^\((?:([\d,]+) of )?([\d,]+) rows?[;)]")


def _union_ns(intervals) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


@pytest.fixture(scope="module")
def truth():
    """Per sample trace, read with Python's json module (exact decimals): events, GPU ops, busy time,
    profiler steps, the profiler's own region figures."""
    out = {}
    folder = ROOT / "sample_traces" / "gpu_h200"
    for path in sorted(folder.glob("*.json.gz")):
        name = path.name.removesuffix(".json.gz")
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            events = json.load(fh, parse_float=Decimal)["traceEvents"]
        gpu = [
            (GPU_KINDS[e["cat"]], e["name"], int(e["ts"] * 1000), int(e["dur"] * 1000))
            for e in events
            if e.get("ph") == "X" and e.get("cat") in GPU_KINDS
        ]
        out[name] = {
            "events": len(events),
            "gpu": gpu,
            "busy_ns": _union_ns([(ts, ts + dur) for _, _, ts, dur in gpu]),
            "steps": sum(
                1 for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
            ),
            "regions": json.loads((folder / f"{name}.key_averages.json").read_text(encoding="utf-8"))["regions"],
        }
    return out


def _number(cell: str) -> float:
    return float(cell.replace(",", "").removesuffix("%").strip())


def _near(shown: str, value: float) -> bool:
    """A humanized number (one decimal, thousands separators) shows ``value``."""
    return abs(_number(shown) - float(value)) <= 0.051


def _near_us(header: list[str], row: list[str], base: str, us: float) -> bool:
    """Column ``base`` (in the table's duration unit, named in its header: ``busy_µs``, ``busy_ms``) shows ``us``."""
    for unit, per_us, rounding in (("µs", 1.0, 0.051), ("ms", 1e3, 0.51), ("s", 1e6, 510.0)):
        if f"{base}_{unit}" in header:  # one decimal of µs, three of ms and s
            return abs(_number(row[header.index(f"{base}_{unit}")]) * per_us - float(us)) <= rounding
    raise AssertionError(f"no {base} column in {header}")


def _same_label(shown: str, full: str) -> bool:
    """A table cell shows ``full``, whole or cut in the middle with an ellipsis."""
    if "\u2026" not in shown:
        return shown == full
    head, tail = shown.split("\u2026")
    return full.startswith(head) and full.endswith(tail) and len(full) >= len(shown)


def _table(stdout: str) -> tuple[list[str], list[list[str]], int | None]:
    """(header cells, data rows split on whitespace, total row count from the footer) of a ``table`` output."""
    lines = stdout.splitlines()
    rule = next(i for i, ln in enumerate(lines) if ln and set(ln) == {"\u2500"})
    rows, total = [], None
    for ln in lines[rule + 1 :]:
        m = FOOTER.match(ln)
        if m:
            total = int(m.group(2).replace(",", ""))
            assert int((m.group(1) or m.group(2)).replace(",", "")) == len(rows), ln  # the rows it says it shows
            break
        rows.append(ln.split())
    return lines[rule - 1].split(), rows, total


def _by_trace(rows: list[list[str]], truth: dict) -> dict[str, list[str]]:
    """Rows keyed by the sample they show (trace labels may be cut in the middle)."""
    out = {}
    for row in rows:
        [name] = [n for n in truth if _same_label(row[0], n)]
        out[name] = row
    return out


def _api(cwd: Path, args: list[str]) -> tuple[list[str], list[tuple]]:
    """(columns, rows) the Python API gives for ``tracekit query NAME SOURCE [-p k=v]`` or ``tracekit sql SOURCE SQL``."""
    source = args[2] if args[1] == "sql" else args[3]
    with tracekit.load(cwd / source) as trace:
        if args[1] == "sql":
            result = trace.sql(args[3])
        else:
            result = trace.query(args[2], dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "-p"))
        return list(result.columns), result.fetchall()


def _check_query_table(cwd: Path, args: list[str], stdout: str) -> None:
    """A query's table shows the API's rows: the same count, the first column's values in order."""
    columns, result = _api(cwd, args)
    header, rows, total = _table(stdout)
    assert total == len(result), (args, total, len(result))
    assert len(rows) == min(total, 40)
    assert header[0] == columns[0]
    firsts = ["" if r[0] is None else str(r[0]) for r in result]
    assert all(_same_label(row[0], full) for row, full in zip(rows, firsts) if full), (args, rows[:3], firsts[:3])


def _check_load(out: dict, truth: dict, db: str, linked: str) -> None:
    events = sum(t["events"] for t in truth.values())
    gpu_ops = sum(len(t["gpu"]) for t in truth.values())
    # (a Dask load first says where its dashboard is, when the scheduler serves one)
    said = [line for line in out["stderr"].strip().splitlines() if not line.startswith("Note: Dask dashboard: ")]
    assert said == [f"{db}: {len(truth)} trace(s), {events:,} events, {gpu_ops:,} GPU ops ({linked})"]


def _check_stages(out: dict, truth: dict) -> None:
    lines = out["stdout"].splitlines()
    assert lines[0] == "Stage breakdown (stage_breakdown)"
    assert any(ln.startswith("Attention calls (attention_calls") for ln in lines)
    header, rows, _ = _table(out["stdout"].split("\n\n")[0])
    gpu = header.index("gpu_µs")  # by name: the width policy picks which columns fit
    stage_rows = {(r[0], r[1]): r for r in rows if r[0] in truth}
    for name in ("naive", "inplace"):  # the stages the capture module labelled, as the profiler timed them
        for region, figures in truth[name]["regions"].items():
            if region.startswith("stage:"):
                row = stage_rows[(name, region.removeprefix("stage:"))]
                assert _near(row[gpu], figures["device_time_total_us"]), (name, region, row)


def _check_region_summary(out: dict, truth: dict) -> None:
    header, rows, total = _table(out["stdout"])
    avg = header.index("gpu_time_avg_µs")  # by name: the width policy picks which columns fit
    attention = {n: r for n, t in truth.items() for r in t["regions"] if r.startswith("attention:")}
    assert total == len(attention) == 10
    for name, row in _by_trace(rows, truth).items():
        figures = truth[name]["regions"][attention[name]]
        assert _same_label(row[1], attention[name])
        assert int(row[2]) == figures["count"]  # occurrences
        assert _near(row[avg], figures["device_time_total_us"] / figures["count"]), (name, row)


def _check_gpu_timeline(out: dict, truth: dict) -> None:
    header, rows, total = _table(out["stdout"])
    assert total == len(truth)
    for name, row in _by_trace(rows, truth).items():  # by name: the width policy picks which columns fit
        assert int(row[header.index("gpu_ops")].replace(",", "")) == len(truth[name]["gpu"]), (name, row)
        assert int(row[header.index("orphan_gpu_ops")]) == 0  # no orphans: every launch is in the samples
        assert _near_us(header, row, "busy", truth[name]["busy_ns"] / 1000), (name, row)


def _check_top_kernels(out: dict, truth: dict) -> None:
    got = list(csv.DictReader(io.StringIO(out["stdout"])))
    want = []
    for name, t in sorted(truth.items()):
        per: dict[tuple, list[int]] = {}
        for kind, kernel, _, dur in t["gpu"]:
            per.setdefault((kind, kernel), []).append(dur)
        top = sorted(per.items(), key=lambda kv: (-sum(kv[1]), kv[0][1]))[:3]
        want += [(name, kind, kernel, len(d), sum(d), min(d), max(d)) for (kind, kernel), d in top]
    cols = ("trace", "kind", "name", "count", "total_ns", "min_ns", "max_ns")
    assert [tuple(r[c] for c in cols) for r in got] == [tuple(str(v) for v in w) for w in want]


def _check_sql(out: dict, cwd: Path, args: list[str]) -> None:
    _, result = _api(cwd, args)
    _, rows, total = _table(out["stdout"])
    assert total == len(result) > 40 and len(rows) == 40
    for row, (op, gpu_ns) in zip(rows, result):
        assert row[0] == op and _near(row[1], gpu_ns / 1000), (row, op, gpu_ns)


def _check_tables(out: dict, cwd: Path) -> None:
    _, rows, _ = _table(out["stdout"])
    with tracekit.open(cwd / "run.duckdb") as trace:
        want = {t["table"]: t for t in trace.tables()}
    shown = {r[0]: r for r in rows}
    assert set(shown) == set(want) >= {"events", "gpu_ops", "cpu_slices", "attention_calls"}
    assert all(int(shown[n][2]) == len(want[n]["columns"]) for n in want)


def _check_queries(out: dict) -> None:
    listed = {ln.split()[0] for ln in out["stdout"].splitlines() if ln and not ln[0].isspace()}
    assert listed == set(queries.library())


def _check_no_collectives(out: dict, truth: dict) -> None:
    _, rows, total = _table(out["stdout"])
    assert total == len(truth)
    assert all(r[1:] == ["0", "0", "0.0"] for r in rows), rows  # single-GPU samples: no collectives


def _check_rank_summary(out: dict, truth: dict) -> None:
    _, rows, total = _table(out["stdout"])
    assert total == len(truth)
    for name, row in _by_trace(rows, truth).items():  # no rank recorded: the rank cell is empty
        assert int(row[2]) == truth[name]["steps"] == 3, (name, row)
        assert _near(row[5], truth[name]["busy_ns"] / 1000), (name, row)


def _check_report(out: dict, truth: dict, names: list[str]) -> None:
    lines = out["stdout"].splitlines()
    assert lines[0] == f"tracekit report: {len(names)} traces, compared with the first ({names[0]})"
    headers = [lines[i - 1].split() for i, ln in enumerate(lines) if ln and set(ln) == {"\u2500"}]  # above rules
    assert [c for cells in headers if set(cells) <= set(names) for c in cells] == names  # the side-by-side blocks
    calls = [c for ln in lines if ln.startswith("attention calls ") for c in ln.split()[2:]]
    per_call = [
        c for ln in lines if ln.startswith("GPU time / call (op-level)") for c in ln.split("  ") if "\u00b5s" in c
    ]
    assert calls == ["3"] * len(names)
    for name, shown in zip(names, per_call):
        figures = truth[name]["regions"][f"attention:{name}"]
        assert _near(shown.removesuffix("\u00b5s"), figures["device_time_total_us"] / figures["count"]), (name, shown)


def _check_report_json(out: dict, cwd: Path, truth: dict) -> None:
    doc = json.loads(out["stdout"])
    assert sorted(t["label"] for t in doc["traces"]) == sorted(truth)
    html = (cwd / "../../report.html").resolve().read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and all(n in html for n in truth)


def _check_diff(out: dict, truth: dict) -> None:
    header, rows, total = _table(out["stdout"])
    assert total == len(rows) == 6
    # --per-call at 100 columns: both sides' time, the delta, delta % and ratio (the op counts left out first).
    assert header == ["stage", "change", "a_µs_per_call", "b_µs_per_call", "delta_µs_per_call", "delta_pct", "ratio"]
    inplace = truth["inplace"]["regions"]
    for stage, change, a, b in (row[:4] for row in rows):
        labelled = inplace.get(f"stage:{stage}")  # the baseline labelled its stages: the profiler timed them
        a_us = _number(a)
        assert _near(a, labelled["device_time_total_us"] / labelled["count"]) if labelled else a_us == 0
        assert change == ("added" if a_us == 0 else "slower" if _number(b) > a_us else "faster"), (stage, change)


def _check_export(out: dict, cwd: Path, truth: dict) -> None:
    original = truth["flash"]["events"]
    assert out["stderr"].startswith(f"run.perfetto.json.gz: flash: {original} events + 3 stage slices ")
    with gzip.open(cwd / "run.perfetto.json.gz", "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    added = Counter(e.get("cat") for e in events[original:])
    assert added["tracekit_stage"] == 3 and added["tracekit_call"] == 3  # one flash kernel per forward, three forwards


REPORTED = ["naive", "inplace", "math", "flash", "cudnn", "flex"]


def _check(cmd: str, out: dict, cwd: Path, truth: dict, outputs: dict) -> bool:
    """Check one example's output; False when the README has an example this test does not know."""
    args = shlex.split(cmd)
    if cmd == "tracekit load sample_traces/gpu_h200 -o run.duckdb":
        _check_load(out, truth, "run.duckdb", "linked on first use")
    elif cmd == "tracekit load sample_traces/gpu_h200 -o ranks.duckdb --jobs 2 --link":
        _check_load(out, truth, "ranks.duckdb", "linked")
    elif cmd == "tracekit load sample_traces/gpu_h200 -o ranks_ds --parquet --dask local:2":
        _check_load(out, truth, "ranks_ds", "linked on first use")
        assert (cwd / "ranks_ds" / "tracekit_dataset.json").is_file()
    elif cmd == "tracekit stages run.duckdb":
        _check_stages(out, truth)
    elif cmd == "tracekit tables run.duckdb":
        _check_tables(out, cwd)
    elif cmd == "tracekit queries -v":
        _check_queries(out)
    elif args[:2] == ["tracekit", "sql"]:
        _check_sql(out, cwd, args)
    elif cmd == f"tracekit report {' '.join(f'{n}.json.gz' for n in REPORTED)}":
        _check_report(out, truth, REPORTED)
    elif cmd == "tracekit report ../../run.duckdb --html ../../report.html --json -":
        _check_report_json(out, cwd, truth)
    elif cmd == "tracekit diff inplace.json.gz math.json.gz --per-call":
        _check_diff(out, truth)
    elif cmd == "tracekit export perfetto run.duckdb -o run.perfetto.json.gz --trace flash":
        _check_export(out, cwd, truth)
    elif args[:2] == ["tracekit", "query"] and "-f" not in args:
        _check_query_table(cwd, args, out["stdout"])
        if args[2] == "region_summary":
            _check_region_summary(out, truth)
        elif args[2] == "gpu_timeline":
            _check_gpu_timeline(out, truth)
        elif args[2] == "stragglers":
            _check_no_collectives(out, truth)
        elif args[2] == "rank_summary":
            _check_rank_summary(out, truth)
        elif args[2] == "attention_skew" and args[3] == "ranks_ds":  # the dataset answers as the database did
            assert out["stdout"] == outputs["tracekit query attention_skew ranks.duckdb"]["stdout"]
    elif cmd == "tracekit query top_kernels run.duckdb -p limit=3 -f csv":
        _check_top_kernels(out, truth)
    else:
        return False
    return True


def test_every_shell_example_prints_a_result(workdir, truth):
    cwd = workdir
    ran = 0
    outputs: dict[str, dict] = {}
    for cmd in _commands():
        if cmd.startswith("cd "):
            cwd = (cwd / shlex.split(cmd)[1]).resolve()
            continue
        assert cmd.startswith("tracekit "), cmd
        res = subprocess.run(cmd, shell=True, cwd=cwd, env=_env(workdir), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{cmd}\n{res.stderr}"
        said = res.stdout.strip() or res.stderr.strip()
        assert said, f"{cmd}: printed nothing"
        assert "(0 rows)" not in res.stdout and "No attention calls" not in res.stdout, f"{cmd}\n{res.stdout}"
        outputs[cmd] = {"stdout": res.stdout, "stderr": res.stderr}
        assert _check(cmd, outputs[cmd], cwd, truth, outputs), f"no check for the README example {cmd!r}"
        ran += 1
    assert ran >= 10
    # The examples that write files wrote them, with content.
    for name in ("run.duckdb", "report.html", "run.perfetto.json.gz"):
        assert (workdir / name).stat().st_size > 0, name


def _profiler_us(name: str, region: str) -> float:
    """The profiler's own key_averages() device time of `region`, recorded beside the sample."""
    path = ROOT / "sample_traces" / "gpu_h200" / f"{name}.key_averages.json"
    return json.loads(path.read_text(encoding="utf-8"))["regions"][region]["device_time_total_us"]


def test_stages_example_shows_gpu_time(workdir):
    res = subprocess.run(
        ["tracekit", "stages", str(workdir / "sample_traces" / "gpu_h200")],
        env=_env(workdir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    header, rows, _ = _table(res.stdout.split("\n\n")[0])
    softmax = next(r for r in rows if r[:2] == ["naive", "softmax"])
    # µs: three forwards of the naive variant's softmax kernels, as the profiler's own table has them
    assert softmax[header.index("gpu_µs")] == f"{_profiler_us('naive', 'stage:softmax'):,.1f}"


def test_python_example_runs(workdir):
    code = next(body for lang, body in _blocks() if lang == "python")
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=workdir, env=_env(workdir), capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert "gpu_time_avg_µs" in res.stdout
    assert f"{_profiler_us('math', 'attention:math') / 3:,.1f}" in res.stdout  # math's GPU time per forward
