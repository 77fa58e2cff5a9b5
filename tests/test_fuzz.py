"""Fuzz: a few hundred mutations of a real trace each end in success or one line naming the file.

The trace is the project's own CPU capture (sample_traces/cpu_attention/flash.json.gz).
Mutations are drawn by a seeded generator (the same every run): truncations, bad bytes,
type swaps, deep nesting (in events and before them), deleted structure and duplicate keys. For each, `tracekit load`
must exit 0 or 1; an error is one `Error:` line that is not an unexpected exception (the
top-level guard says "unexpected" for those), and nothing is left beside the output or in
TMPDIR. Every tenth successful load also runs a query that links the database.
"""

from __future__ import annotations

import gzip
import random
import re
import tempfile
from pathlib import Path

import pytest
from conftest import slow_unless

from tracekit.cli import main

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "sample_traces" / "cpu_attention" / "flash.json.gz"
SEED = 15
SWAPS = ["true", "false", "null", "[]", "{}", '"x"', "1e400", "-1", "-9223372036854775809", '""', "0.5", '"12"']
_VALUE = re.compile(rb'(?<=": )(-?\d+(\.\d+)?|"[^"\\]*"|true|false|null)')


def mutations() -> list[tuple[str, bytes]]:
    text = gzip.decompress(BASE.read_bytes())
    rng = random.Random(SEED)
    out: list[tuple[str, bytes]] = []
    n = len(text)
    for _ in range(40):
        cut = rng.randrange(n)
        out.append((f"truncate@{cut}", text[:cut]))
    for _ in range(40):
        at = rng.randrange(n)
        bad = rng.choice([b"\xff", b"\x00", b"\xc3", b"\xed\xa0\x80", b"\x1b[2J", b"\\", b'"'])
        out.append((f"bytes@{at}", text[:at] + bad + text[at:]))
    values = list(_VALUE.finditer(text))
    for _ in range(100):
        m = rng.choice(values)
        swap = rng.choice(SWAPS).encode()
        out.append((f"swap@{m.start()}={swap.decode()}", text[: m.start()] + swap + text[m.end() :]))
    for _ in range(10):
        m = rng.choice(values)
        depth = rng.choice([50, 600, 3000])
        deep = b"[" * depth + b"]" * depth
        out.append((f"deep{depth}@{m.start()}", text[: m.start()] + deep + text[m.end() :]))
    first = text.index(b"{") + 1
    for depth in (100, 900, 1500, 5000, 20000):  # before traceEvents: Python's parser reads the header
        deep = b"[" * depth + b"]" * depth
        out.append((f"deephead{depth}", text[:first] + b'"deep": ' + deep + b", " + text[first:]))
    structure = [i for i, c in enumerate(text) if c in b"{}[],:"]
    for _ in range(50):
        at = rng.choice(structure)
        out.append((f"delete@{at}", text[:at] + text[at + 1 :]))
    opens = [i for i, c in enumerate(text) if c == ord("{")]
    for _ in range(10):
        at = rng.choice(opens) + 1
        out.append((f"dupkey@{at}", text[:at] + b'"ts": 5, "ph": "X", ' + text[at:]))
    return out


CASES = mutations()


@pytest.fixture
def staging(tmp_path, monkeypatch):
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.mark.parametrize("chunk", [slow_unless(chunk == 0, chunk) for chunk in range(5)])  # one fifth in every run
def test_mutated_traces_end_in_success_or_one_line(chunk, tmp_path, staging, capsys):
    failures = []
    loaded = 0
    for i, (name, data) in enumerate(CASES):
        if i % 5 != chunk:
            continue
        case = tmp_path / f"case{i}"
        case.mkdir()
        path = case / "trace.json"
        path.write_bytes(data)
        out = case / "t.duckdb"
        code = main(["load", str(path), "-o", str(out), "-q"])
        err = capsys.readouterr().err.strip()
        load_failed = code == 1
        if code == 0:
            loaded += 1
            if loaded % 10 == 1:
                code = main(["query", "stage_breakdown", str(out), "-f", "csv"])
                err = capsys.readouterr().err.strip()
        problem = None
        if code not in (0, 1):
            problem = f"exit {code}"
        elif code == 1 and (len(err.splitlines()) != 1 or not err.startswith("Error: ") or "unexpected" in err):
            problem = f"not one expected line: {err[:300]!r}"
        elif load_failed and out.exists():
            problem = "a failed load left a database behind"
        elif load_failed and str(path) not in err:
            problem = f"error does not name the file: {err[:300]!r}"
        leftovers = [p.name for p in case.iterdir() if p.name.startswith(".")] + [p.name for p in staging.iterdir()]
        if leftovers:
            problem = f"leftovers {leftovers}"
        if problem:
            failures.append(f"{name}: {problem}")
    assert not failures, f"{len(failures)} mutation(s) failed:\n" + "\n".join(failures[:10])


def hostile() -> list[tuple[str, bytes]]:
    """The layouts of the reliability probe (docs/safety.md, "Hostile layouts"): long runs of white space,
    huge strings and keys, many header keys, a byte order mark with CRLF line ends."""
    text = gzip.decompress(BASE.read_bytes())
    first = text.index(b"{") + 1
    events = text.index(b"[", text.index(b'"traceEvents"')) + 1
    between = text.index(b"},", events) + 2
    name = text.index(b'"name": "', events) + len(b'"name": "')
    mb = 1 << 20
    return [
        ("ws_lead", b" " * (8 * mb) + text),
        ("ws_head", text[:first] + b"\n" * (8 * mb) + text[first:]),
        ("ws_events", text[:between] + b" \t" * mb + text[between:]),
        ("huge_name", text[:name] + b"n" * (4 * mb) + text[name:]),
        ("huge_header_string", text[:first] + b'"big": "' + b"x" * (4 * mb) + b'", ' + text[first:]),
        ("huge_key", text[:first] + b'"' + b"k" * mb + b'": 1, ' + text[first:]),
        ("many_keys", text[:first] + b"".join(b'"k%d": %d, ' % (i, i) for i in range(100_000)) + text[first:]),
        ("bom_crlf", b"\xef\xbb\xbf" + text.replace(b"\n", b"\r\n")),
        ("ws_truncated", text[:first] + b" " * (8 * mb)),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, _ in hostile()])
def test_hostile_layouts_end_in_success_or_one_line(name, tmp_path, staging, capsys):
    import time

    data = dict(hostile())[name]
    path = tmp_path / "trace.json"
    path.write_bytes(data)
    out = tmp_path / "t.duckdb"
    start = time.monotonic()
    code = main(["load", str(path), "-o", str(out), "-q"])
    took = time.monotonic() - start
    err = capsys.readouterr().err.strip()
    assert code in (0, 1), err
    if code == 1:
        assert len(err.splitlines()) == 1 and err.startswith("Error: ") and "unexpected" not in err, err
        assert str(path) in err and not out.exists()
    assert took < 60, f"{took:.0f} s"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [] and list(staging.iterdir()) == []
