"""The second round of reliability promises (docs/safety.md): outputs replaced only by complete new ones,
workers that die with their parent, errors that name the cause and the file, linear reading of hostile
layouts, settings user SQL cannot change.

Inputs are the project's own CPU captures (sample_traces/cpu_attention) and synthetic traces whose truth is
known by construction (tests/synthetic.py's "math" variant, or written here). A full disk is a deterministic
fault hook (``TRACEKIT_FAULT=enospc@POINT``, which the dataset writer honours) or RLIMIT_FSIZE in a child.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import slow_unless
from synthetic import post_variants

import tracekit
from tracekit.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces" / "cpu_attention"
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "math.json.gz"
    post_variants()["math"].write(path)
    return path


def _env(**extra) -> dict:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _cli(*args, **extra):
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True, text=True, env=_env(**extra)
    )


def _one_line(err: str, *needles: str) -> str:
    err = err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("Error: "), err
    for needle in needles:
        assert needle in err, err
    return err


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def _traces(dataset: Path) -> int:
    with tracekit.load(dataset) if dataset.is_dir() else tracekit.open(dataset) as trace:
        return trace.rows("SELECT count(*) FROM traces")[0][0]


# ---- 1. an output is replaced only by a complete new one --------------------------------------------------


@pytest.fixture
def dataset(tmp_path, trace_file):
    out = tmp_path / "ds"
    assert main(["load", str(trace_file), "-o", str(out), "--parquet", "-q"]) == 0
    return out


def test_a_failed_parquet_force_keeps_the_old_dataset(dataset, tmp_path, capsys):
    """The old folder was removed before the build: a bad input left nothing."""
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    before = sorted(p.relative_to(dataset) for p in dataset.rglob("*"))
    assert main(["load", str(bad), "-o", str(dataset), "--parquet", "--force", "-q"]) == 1
    _one_line(capsys.readouterr().err, str(bad))
    assert sorted(p.relative_to(dataset) for p in dataset.rglob("*")) == before
    assert _traces(dataset) == 1
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("point", [slow_unless(p == "commit", p) for p in ("commit", "part", "publish")])
def test_a_full_disk_during_a_parquet_force_keeps_the_old_dataset(
    point, dataset, tmp_path, trace_file, monkeypatch, capsys
):
    """A full disk in a task, while the partitions move into place, or at the swap: one line naming the output,
    the old dataset as it was (a partial dataset of the traces written before was once committed)."""
    monkeypatch.setenv("TRACEKIT_FAULT", f"enospc@{point}")
    args = ["load", str(trace_file), "-o", str(dataset), "--parquet", "--force", "-q", "--jobs", "1"]
    assert main(args) == 1
    _one_line(capsys.readouterr().err, f"{dataset}:", "No space left", "nothing was replaced")
    monkeypatch.delenv("TRACEKIT_FAULT")
    assert _traces(dataset) == 1
    assert _hidden(tmp_path) == []


@pytest.mark.slow
def test_parquet_force_replaces_a_dataset_and_a_killed_loads_leftover(dataset, tmp_path, trace_file, capsys):
    second = tmp_path / "math2.json.gz"
    shutil.copyfile(trace_file, second)
    assert main(["load", str(trace_file), str(second), "-o", str(dataset), "--parquet", "--force", "-q"]) == 0
    assert _traces(dataset) == 2
    # What a killed load of the earlier layout left: a folder without its manifest, holding its parts.
    stale = tmp_path / "stale"
    (stale / ".staging" / "000000.123.tmp").mkdir(parents=True)
    (stale / "events").mkdir()
    assert main(["load", str(trace_file), "-o", str(stale), "--parquet", "-q"]) == 1
    _one_line(capsys.readouterr().err, "already exists", "--force")
    assert main(["load", str(trace_file), "-o", str(stale), "--parquet", "--force", "-q"]) == 0
    assert _traces(stale) == 1
    # Anything else is not replaced, even with --force.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["load", str(trace_file), "-o", str(other), "--parquet", "--force", "-q"]) == 1
    _one_line(capsys.readouterr().err, "not a tracekit dataset")
    assert (other / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_a_killed_parquet_loads_folder_is_removed_by_the_next(tmp_path, trace_file):
    """The build folder carries the host and pid of its process, as outputs' temporary files do."""
    from tracekit.common import outputs

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = outputs.temp_name(tmp_path / "ds")
    stale = stale.with_name(stale.name.replace(f"-{os.getpid()}-", f"-{int(dead.stdout)}-"))
    (stale / "events").mkdir(parents=True)
    assert main(["load", str(trace_file), "-o", str(tmp_path / "ds"), "--parquet", "-q"]) == 0
    assert _hidden(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("parquet", [False, True], ids=["duckdb", "parquet"])
def test_concurrent_loads_to_one_new_output_exactly_one_wins(parquet, tmp_path, trace_file):
    """Without --force, "exists" is decided at the swap: of 4 loads started together to one new -o, one
    writes it and the others say it exists (all 8 once exited 0, 7 replacing a file that existed by then)."""
    out = tmp_path / ("ds" if parquet else "t.duckdb")
    args = ["load", str(trace_file), "-o", str(out), "-q"] + (["--parquet"] if parquet else [])
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tracekit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
        )
        for _ in range(4)
    ]
    results = [(p.wait(60), p.stderr.read().decode()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 1, 1, 1], results
    for code, err in results:
        if code:
            _one_line(err, "already exists")
    assert _traces(out) == 1
    assert _hidden(tmp_path) == []


@pytest.mark.slow
def test_concurrent_parquet_force_loads_both_succeed(dataset, tmp_path, trace_file):
    """The loser of two --force loads once found the winner's half-built folder: "not a tracekit dataset"."""
    args = [sys.executable, "-m", "tracekit", "load", str(trace_file), "-o", str(dataset), "--parquet", "--force", "-q"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()) for _ in range(3)]
    results = [(p.wait(60), p.stderr.read().decode()) for p in procs]
    assert [code for code, _ in results] == [0, 0, 0], results
    assert _traces(dataset) == 1
    assert _hidden(tmp_path) == []


# ---- 2. workers die with their parent ------------------------------------------------------------------


def _descendants(pid: int) -> set[int]:
    """The live descendants of ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill_when_workers_run(args: list[str], workers: int, tmp_path: Path) -> tuple[float, set[int]]:
    """Start ``tracekit ARGS`` with pipes, SIGKILL it once ``workers`` worker processes run, and return the
    seconds until its pipes close (every process holding them gone) and the descendants seen."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env()
    )
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        seen |= _descendants(proc.pid)
        # The workers (and the resource tracker) run, and a task has begun writing its part.
        if len(seen) > workers and any(p.name.startswith("00000") for p in tmp_path.rglob("*")):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the load ended before it could be killed: give it more work"
    seen |= _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    start = time.monotonic()
    proc.communicate(timeout=30)  # EOF once every holder of the pipes is gone
    return time.monotonic() - start, seen


def _copies(tmp_path: Path, n: int, trace: Path = SAMPLES / "flash.json.gz") -> list[str]:
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(n):
        shutil.copyfile(trace, folder / f"t{i}.json.gz")
    return [str(folder)]


@pytest.mark.slow
@pytest.mark.parametrize("parquet", [False, True], ids=["jobs", "parquet"])
def test_sigkill_of_a_parallel_load_leaves_no_process(parquet, tmp_path):
    """Kill -9 of ``load --jobs 2`` left its workers and resource tracker alive (one set after 522 s), holding
    the caller's pipes open."""
    args = [*_copies(tmp_path, 40), "-o", str(tmp_path / ("ds" if parquet else "t.duckdb")), "--jobs", "2", "--link"]
    if parquet:
        args = [a for a in args if a != "--link"] + ["--parquet"]
    waited, seen = _kill_when_workers_run(["load", *args], 2, tmp_path)
    assert seen, "no worker process was seen"
    assert waited < 2, f"the pipes stayed open {waited:.1f} s after the kill"
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(_alive(p) for p in seen):
        time.sleep(0.05)
    assert not [p for p in seen if _alive(p)]


@pytest.mark.slow
def test_sigkill_of_a_dask_local_load_leaves_no_process(tmp_path):
    pytest.importorskip("distributed")
    args = [*_copies(tmp_path, 40), "-o", str(tmp_path / "ds"), "--parquet", "--dask", "local:2"]
    waited, seen = _kill_when_workers_run(["load", *args], 2, tmp_path)
    assert waited < 2, f"the pipes stayed open {waited:.1f} s after the kill"
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(_alive(p) for p in seen):
        time.sleep(0.05)
    assert not [p for p in seen if _alive(p)]


# ---- 4. errors name the cause and the file ---------------------------------------------------------------


def _interrupt_at(args: list[str], at: float, tmp_path: Path, name: str) -> tuple[int, str, float, list[str]]:
    """Run ``tracekit ARGS`` (OUT replaced by a fresh folder), SIGINT it after ``at`` s; return its exit code,
    stderr, the seconds it took to end after the signal, and what it left in its output folder and TMPDIR."""
    out = tmp_path / f"out-{name}"
    staging = tmp_path / f"tmp-{name}"
    out.mkdir()
    staging.mkdir()
    args = [a.replace("OUT", str(out)) for a in args]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(TMPDIR=str(staging)),
    )
    time.sleep(at)
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - start
    return proc.returncode, err.decode(), took, sorted(p.name for p in [*out.iterdir(), *staging.iterdir()])


@pytest.mark.parametrize(
    "mode,at",
    [
        slow_unless(i == 0, mode, at, id=f"{mode}@{at}")
        for i, (mode, at) in enumerate(
            [("jobs", 1.0)]
            + [(m, t) for m in ("link", "jobs", "parquet") for t in (0.5, 0.8, 1.2, 1.8, 2.5)]
            + [("dask", t) for t in (2.0, 3.0, 4.0)]
        )
    ],
)
def test_sigint_at_any_moment_is_interrupted_130_and_leaves_nothing(mode, at, tmp_path):
    """SIGINT once gave a 23-line traceback (while modules imported) or DuckDB's "INTERRUPT Error" and exit 1;
    ``--jobs 2`` waited for its workers. (Before 0.5 s the interpreter itself may still be starting: Python's
    own startup, before any tracekit code, is outside the promise.)"""
    # Enough work that every mode is still loading at the last moment (files are grouped per task: 40 copies of
    # flash.json.gz, once 3-10 s of work, now finish in 1-4 s), and statements short enough to stop within 1 s
    copies = 320 if mode == "jobs" else 80
    inputs = _copies(tmp_path, copies, SAMPLES.parent / "cpu_serving" / "serving_tgi.json.gz")
    args = {
        "link": ["load", *inputs, "-o", "OUT/t.duckdb", "--link", "--jobs", "1"],
        "jobs": ["load", *inputs, "-o", "OUT/t.duckdb", "--jobs", "2"],
        "parquet": ["load", *inputs, "-o", "OUT/ds", "--parquet", "--jobs", "2"],
        "dask": ["load", *inputs, "-o", "OUT/ds", "--parquet", "--dask", "local:2"],
    }[mode]
    if mode == "dask":
        pytest.importorskip("distributed")
    code, err, took, left = _interrupt_at(args, at, tmp_path, f"{mode}{at}")
    assert code == 130, err[-2000:]
    # (a Dask load first says where its dashboard is, when the scheduler serves one)
    said = [line for line in err.strip().splitlines() if line and not line.startswith("Note: Dask dashboard: ")]
    assert said == ["Interrupted."], err[-2000:]
    assert took < 1.0, f"took {took:.2f} s to stop"
    assert left == []


def test_out_of_memory_names_the_file_and_the_cap(trace_file, tmp_path, monkeypatch, capsys):
    """Out of memory while linking was reported as "TransactionContext Error: Current transaction is aborted":
    the build's cleanup ran on the aborted transaction and replaced the real error."""
    db = tmp_path / "t.duckdb"
    tracekit.load(trace_file, output=db).close()
    monkeypatch.setenv("TRACEKIT_MEMORY_LIMIT", "4MB")
    assert main(["query", "stage_breakdown", str(db)]) == 1
    err = _one_line(capsys.readouterr().err, str(db), "out of memory", "4MB", "TRACEKIT_MEMORY_LIMIT")
    assert "transaction is aborted" not in err.lower()


@pytest.mark.slow
def test_one_unreadable_file_among_many_is_named_and_the_rest_load(trace_file, tmp_path, capsys):
    """A folder with one file the cap's estimate could not open gave that error and no output (the cap was
    estimated by opening every file before any task). A symbolic link loop stands in for an unreadable file:
    root reads a mode-000 file."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    for i in range(3):
        shutil.copyfile(trace_file, folder / f"rank{i}.json.gz")
    (folder / "rank3.json").symlink_to(folder / "rank3.json")
    out = tmp_path / "t.duckdb"
    assert main(["load", str(folder), "-o", str(out), "-q", "--jobs", "1"]) == 1
    err = capsys.readouterr().err
    assert f"{folder / 'rank3.json'}: symbolic link loop" in err
    assert "1 of 4 trace files failed to load (rank3.json)" in err
    assert _traces(out) == 3


@pytest.mark.parametrize("kind", [slow_unless(k == "loop", k) for k in ("loop", "dangling")])
def test_a_bad_link_is_named_as_such(kind, tmp_path, capsys):
    """A symbolic link loop was reported as "no such file or directory"."""
    link = tmp_path / "t.json"
    link.symlink_to(link if kind == "loop" else tmp_path / "gone.json")
    assert main(["load", str(link), "-o", str(tmp_path / "t.duckdb")]) == 1
    _one_line(capsys.readouterr().err, str(link), "symbolic link loop" if kind == "loop" else "dangling")


@pytest.mark.skipif(ROOT_USER, reason="root reads and writes whatever the modes say")
def test_permissions_are_named_as_such(trace_file, tmp_path, capsys):
    """An unreadable folder was "holds no *.json"; load -o into a read-only folder named the temporary file."""
    folder = tmp_path / "ranks"
    folder.mkdir()
    shutil.copyfile(trace_file, folder / "rank0.json.gz")
    folder.chmod(0)
    try:
        assert main(["load", str(folder), "-o", str(tmp_path / "t.duckdb")]) == 1
        _one_line(capsys.readouterr().err, str(folder), "permission denied")
    finally:
        folder.chmod(0o755)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert main(["load", str(trace_file), "-o", str(locked / "t.duckdb")]) == 1
        err = _one_line(capsys.readouterr().err, str(locked / "t.duckdb"), "permission denied")
        assert ".tk-" not in err
    finally:
        locked.chmod(0o755)


def test_an_error_naming_the_temporary_file_names_the_output(tmp_path):
    """What a writer into a temporary file reports (DuckDB's IOException) names the output instead."""
    import duckdb

    from tracekit.common import outputs
    from tracekit.errors import TracekitError

    target = tmp_path / "t.duckdb"
    with pytest.raises(TracekitError) as caught, outputs.replacing(target) as tmp:
        raise duckdb.IOException(f'IO Error: Cannot open file "{tmp}": Permission denied')
    assert str(caught.value).startswith(f"{target}: cannot write it") and ".tk-" not in str(caught.value)
    assert _hidden(tmp_path) == []


_DIRECTORY_OUTPUTS = {
    "sql": ["sql", "SRC", "SELECT 1", "-o", "DIR"],
    "query": ["query", "gpu_timeline", "SRC", "-o", "DIR"],
    "tables": ["tables", "SRC", "-o", "DIR"],
    "report-html": ["report", "SRC", "--html", "DIR"],
    "report-json": ["report", "SRC", "--json", "DIR"],
    "export": ["export", "perfetto", "SRC", "-o", "DIR"],
}


@pytest.mark.parametrize("args", [slow_unless(i == 0, a, id=k) for i, (k, a) in enumerate(_DIRECTORY_OUTPUTS.items())])
def test_a_directory_as_output_is_one_error_line(args, trace_file, tmp_path, capsys):
    """It was click's usage error (exit 2, three lines)."""
    folder = tmp_path / "folder"
    folder.mkdir()
    args = [str(trace_file) if a == "SRC" else str(folder) if a == "DIR" else a for a in args]
    assert main(args) == 1
    _one_line(capsys.readouterr().err, str(folder), "is a directory")


# ---- 6. settings that protect the process ------------------------------------------------------------------


_PROTECTED = [
    "SET memory_limit = '1TB'",
    "SET GLOBAL threads = 64",
    "PRAGMA threads = 64",
    "RESET memory_limit",
    "SELECT 1; /* then */ SET max_temp_directory_size = '1PB'",
    "SET \"temp_directory\" TO '/'",
]


@pytest.mark.parametrize("statement", [slow_unless(i == 0, s) for i, s in enumerate(_PROTECTED)])
def test_user_sql_cannot_change_a_protected_setting(statement, trace_file, capsys):
    """SET memory_limit and threads were accepted from user SQL."""
    assert main(["sql", str(trace_file), statement]) == 1
    _one_line(capsys.readouterr().err, "may not change the setting")
    with tracekit.load(trace_file) as trace:
        with pytest.raises(tracekit.TracekitError, match="may not change the setting"):
            trace.sql(statement)
        # Reading settings, the user's own variables and PRAGMAs that read stay allowed.
        trace.sql("SET VARIABLE x = 41")
        assert trace.rows("SELECT getvariable('x') + 1") == [(42,)]
        assert trace.rows("SELECT current_setting('threads') > 0") == [(True,)]
        assert trace.rows("PRAGMA table_info('events')")


@pytest.mark.parametrize(
    "command",
    [
        slow_unless(i == 0, c)
        for i, c in enumerate([["query", "gpu_timeline", "SRC"], ["sql", "SRC", "SELECT 1"], ["stages", "SRC"]])
    ],
)
def test_an_invalid_memory_limit_fails_every_command(command, trace_file, tmp_path, monkeypatch, capsys):
    """``query`` over a database it did not have to link ignored an invalid TRACEKIT_MEMORY_LIMIT."""
    db = tmp_path / "t.duckdb"
    tracekit.load(trace_file, output=db).close()
    monkeypatch.setenv("TRACEKIT_MEMORY_LIMIT", "lots")
    assert main([str(db) if a == "SRC" else a for a in command]) == 1
    _one_line(capsys.readouterr().err, "TRACEKIT_MEMORY_LIMIT='lots'")


# ---- 5. linear-time reading of hostile layouts -----------------------------------------------------------


@pytest.mark.parametrize(
    "layout", [slow_unless(i == 0, x) for i, x in enumerate(["leading", "between_keys", "huge_string"])]
)
def test_a_hostile_header_is_read_in_linear_time(layout, tmp_path, monkeypatch):
    """256 MiB of white space before traceEvents ran past 300 s: each read of a block parsed the header again
    from its start, skipping white space one character at a time in Python (quadratic). Here 4 MiB with
    64 KiB blocks (64 reads): the characters parsed over all tries stay within 4x the header."""
    from tracekit.ingest import scan

    monkeypatch.setattr(scan, "BLOCK_BYTES", 64 << 10)
    parsed = []
    real = scan._parse_head

    def counting(text, at_eof, path):
        parsed.append(len(text))
        return real(text, at_eof, path)

    monkeypatch.setattr(scan, "_parse_head", counting)
    n = 4 << 20
    events = '[{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]'
    text = {
        "leading": " " * n + '{"traceEvents": ' + events + "}",
        "between_keys": '{"a": 1,' + "\n" * n + '"traceEvents": ' + events + "}",
        "huge_string": '{"name": "' + "x" * n + '", "traceEvents": ' + events + "}",
    }[layout]
    path = tmp_path / "hostile.json"
    path.write_text(text)
    start = time.monotonic()
    staged = scan.stage(path, tmp_path, "t")
    took = time.monotonic() - start
    assert sum(parsed) <= 4 * len(text), f"{len(parsed)} tries parsed {sum(parsed):,} characters"
    assert took < 5, f"{took:.1f} s"
    assert staged.form == "object"
    with tracekit.load(path) as trace:
        assert trace.rows("SELECT count(*) FROM events") == [(1,)]


@pytest.mark.parametrize("output", ["ds", "t.duckdb"])
def test_a_ctrl_c_that_a_library_caught_still_writes_nothing(output, tmp_path, monkeypatch, capsys):
    """distributed can catch the KeyboardInterrupt of a Ctrl-C while a local cluster starts (seen on an
    oversubscribed machine): the load ran on, wrote its output and exited 0. The Ctrl-C is remembered for the
    process: the load writes nothing and ends as any interrupted command does."""
    from tracekit.common import interrupts

    monkeypatch.setattr(interrupts, "_seen", True)  # as the command's SIGINT handler leaves it
    out = tmp_path / output
    args = ["load", str(SAMPLES / "flash.json.gz"), str(SAMPLES / "math.json.gz"), "-o", str(out), "-q"]
    args += ["--parquet", "--jobs", "1"] if output == "ds" else ["--jobs", "1"]
    assert main(args) == 130
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []
    assert capsys.readouterr().err.strip() == "Interrupted."
