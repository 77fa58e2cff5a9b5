"""Outputs never destroy what was there: atomic replace, no devices, no inputs, no leftovers.

The trace is synthetic (tests/synthetic.py, the post's "math" variant). A full
disk is simulated with RLIMIT_FSIZE in a child process (writes past it fail
with EFBIG, as on a full disk); a device with a FIFO made in the test folder,
so a regression cannot break the machine's /dev/null.
"""

from __future__ import annotations

import os
import resource
import shutil
import stat
import subprocess
import sys

import pytest
from synthetic import post_variants

import tracekit
from tracekit.cli import main
from tracekit.common import outputs
from tracekit.errors import TracekitError


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "math.json.gz"
    post_variants()["math"].write(path)
    return path


@pytest.fixture(scope="module")
def linked_db(tmp_path_factory):
    """The math variant loaded and linked into a .duckdb once for the module."""
    folder = tmp_path_factory.mktemp("linked")
    post_variants()["math"].write(folder / "math.json.gz")
    out = folder / "t.duckdb"
    tracekit.load(folder / "math.json.gz", output=out, link=True).close()
    assert _hidden(folder) == []  # the load left nothing beside its output
    return out


@pytest.fixture
def db(linked_db, tmp_path):
    """A copy of ``linked_db`` in the test's folder, beside its trace file: the test may write over it."""
    out = tmp_path / "t.duckdb"
    shutil.copyfile(linked_db, out)
    return out


def _run(args, fsize: int | None = None, **kw):
    def limit():
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True, text=True, preexec_fn=limit, **kw
    )


def _hidden(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _one_line_error(proc, *needles) -> None:
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["load", "{trace}", "-o", "{fifo}", "--force"],
        ["query", "gpu_timeline", "{db}", "-f", "csv", "-o", "{fifo}"],
        ["sql", "{db}", "SELECT 1", "-o", "{fifo}"],
        ["export", "perfetto", "{db}", "-o", "{fifo}"],
        ["report", "{db}", "--html", "{fifo}", "-q"],
    ],
)
def test_a_device_or_fifo_is_never_replaced(args, trace_file, db, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    args = [a.format(trace=trace_file, db=db, fifo=fifo) for a in args]
    proc = _run(args, timeout=120)
    _one_line_error(proc, str(fifo), "not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize(
    "args",
    [
        ["load", "{trace}", "-o", "{trace}", "--force"],
        ["query", "gpu_timeline", "{trace}", "-f", "csv", "-o", "{trace}"],
        ["sql", "{db}", "SELECT 1", "-f", "csv", "-o", "{db}"],
        ["export", "perfetto", "{trace}", "-o", "{trace}"],
        ["report", "{trace}", "--json", "{trace}", "-q"],
    ],
)
def test_an_input_is_never_overwritten(args, trace_file, db, tmp_path):
    before = {p: p.read_bytes() for p in (trace_file, db)}
    args = [a.format(trace=trace_file, db=db) for a in args]
    proc = _run(args, timeout=120, env={**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "cache")})
    _one_line_error(proc, "is an input of this command")
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize(
    "args",
    [
        ["sql", "{db}", "SELECT * FROM events", "-f", "csv", "-o", "{out}"],
        ["sql", "{db}", "SELECT * FROM events", "-f", "json", "-o", "{out}"],
        ["sql", "{db}", "SELECT * FROM events", "-f", "parquet", "-o", "{out}"],
        ["report", "{db}", "--html", "{out}", "-q"],
        ["export", "perfetto", "{db}", "-o", "{out}"],
        ["load", "{trace}", "-o", "{out}", "--force", "-q"],
    ],
)
def test_a_full_disk_leaves_the_previous_file(args, trace_file, db, tmp_path):
    """Writes past the limit fail (EFBIG, as ENOSPC would): one line, the old file intact, no temp file."""
    out = tmp_path / "out.file"
    out.write_text("previous\n")
    args = [a.format(trace=trace_file, db=db, out=out) for a in args]
    proc = _run(args, fsize=2048, timeout=120)
    _one_line_error(proc, str(out))
    assert out.read_text() == "previous\n"
    assert _hidden(tmp_path) == []


def test_outputs_replace_atomically_and_follow_symlinks(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    outputs.write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(real.stat().st_mode) == 0o666 & ~umask
    with pytest.raises(TracekitError, match="does not exist"):
        outputs.write_text(tmp_path / "missing" / "x.txt", "x")


def test_leftovers_of_a_dead_process_are_removed_at_the_next_write(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    stale = outputs.temp_name(tmp_path / "x.duckdb").name.replace(f"-{os.getpid()}-", f"-{pid}-")
    for suffix in ("", ".wal"):
        (tmp_path / (stale + suffix)).write_text("junk")
    (tmp_path / (stale + ".tmp")).mkdir()  # DuckDB's spill folder
    mine = outputs.temp_name(tmp_path / "y.duckdb")
    mine.write_text("a live process's temp file")
    outputs.write_text(tmp_path / "report.json", "{}")
    assert _hidden(tmp_path) == [mine.name]


def test_query_output_to_a_file_matches_stdout(db, tmp_path, capsys):
    out = tmp_path / "o.csv"
    assert main(["sql", str(db), "SELECT id, name FROM events ORDER BY id", "-f", "csv", "-o", str(out)]) == 0
    assert main(["sql", str(db), "SELECT id, name FROM events ORDER BY id", "-f", "csv"]) == 0
    assert out.read_text() == capsys.readouterr().out


def test_a_full_tmpdir_is_named_in_the_error(trace_file, tmp_path, monkeypatch, capsys):
    """The staging copy (about the uncompressed trace) goes to TMPDIR: when it fills, the error says so.

    A full TMPDIR is simulated where the staging copy is written (ENOSPC, as the kernel reports it)."""
    import errno
    import tempfile

    from tracekit.ingest import scan

    staging = tmp_path / "tmpdir"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))

    def full(self, data, body_offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(scan._PartWriter, "write", full)
    out = tmp_path / "x.duckdb"
    assert main(["load", str(trace_file), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"Error: {trace_file}: out of space while staging in {staging} (TMPDIR") and "\n" not in err
    assert not out.exists() and list(staging.iterdir()) == [] and _hidden(tmp_path) == []
