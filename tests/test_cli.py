"""The command line: every command through click's CliRunner, output checked whole."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import cli, main
from tracekit.ingest import scan

EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 100.0, "dur": 10.0},
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 7,
        "tid": 7,
        "ts": 101.0,
        "dur": 2.0,
        "args": {"correlation": 5},
    },
    {
        "ph": "X",
        "cat": "kernel",
        "name": "gemm",
        "pid": 0,
        "tid": 7,
        "ts": 104.0,
        "dur": 3.5,
        "args": {"correlation": 5, "stream": 7, "device": 0},
    },
]


@pytest.fixture
def tiny(tmp_path):
    """A three-event trace: one op launching one 3.5 µs kernel (ground truth by construction)."""
    path = tmp_path / "tiny_rank3.json"
    path.write_text(json.dumps({"traceEvents": EVENTS}))
    return path


def invoke(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return result


def test_help_everywhere_has_an_example():
    assert "Example:" in invoke("-h").output
    for name in cli.commands:
        out = invoke(name, "-h")
        assert out.exit_code == 0 and "Example:" in out.output, name


def test_python_dash_m_works():
    out = subprocess.run([sys.executable, "-m", "tracekit", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == f"tracekit, version {tracekit.__version__}\n"


def test_command_exits_fast_with_whole_output_and_its_code(tiny, tmp_path):
    """The command (cli.run) ends with os._exit: what it printed is all there, piped, and the
    exit code is main's, for an answer and for an error."""
    env = {**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, "-m", "tracekit", "stages", str(tiny), "-f", "json"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["attention_calls_total"] == 0
    assert sum(r["gpu_ns"] for r in answer["stage_breakdown"]) == 3500
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    out = subprocess.run(
        [sys.executable, "-m", "tracekit", "stages", str(bad)], capture_output=True, text=True, env=env
    )
    assert out.returncode == 1
    assert out.stderr.startswith("Error: ") and str(bad) in out.stderr and out.stdout == ""


def test_main_leaves_the_callers_environment_and_interpreter_alone(tiny, tmp_path, monkeypatch, capsys):
    """main (what Python callers and tests run) returns its code and changes no environment variable:
    --allow-files reaches the traces it opens, not os.environ (it used to export TRACEKIT_ALLOW_FILES,
    which every later trace of the caller's process then inherited)."""
    monkeypatch.delenv("TRACEKIT_ALLOW_FILES", raising=False)
    monkeypatch.delenv("_RJEM_MALLOC_CONF", raising=False)
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n41\n")
    before = dict(os.environ)
    sql = f"SELECT a + 1 AS b FROM read_csv('{secret}')"
    assert main(["--allow-files", "sql", str(tiny), sql, "-f", "csv"]) == 0
    assert capsys.readouterr().out == "b\n42\n"
    assert dict(os.environ) == before
    assert main(["sql", str(tiny), sql, "-f", "csv"]) == 1  # the flag did not outlive its command
    assert "--allow-files" in capsys.readouterr().err
    assert main(["--allow-files", "load", str(tiny), "-o", str(tmp_path / "t.duckdb"), "-q"]) == 0
    assert dict(os.environ) == before


@pytest.mark.parametrize("user", [None, "dirty_decay_ms:5000"])
def test_the_command_process_sets_polars_allocator_unless_the_user_did(user):
    """The tracekit process (cli.run), not the library, sets the allocator setting polars reads as it loads,
    before anything imports polars; a value the user set is kept."""
    from tracekit import cli as cli_module

    name, value = cli_module.POLARS_ALLOCATOR
    env = {k: v for k, v in os.environ.items() if k != name}
    if user is not None:
        env[name] = user
    code = (
        "import os, sys; import tracekit.cli as c;"
        f" c.main = lambda argv=None: print(os.environ.get({name!r}), 'polars' in sys.modules) or 0; c.run()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == [user or value, "False"]


def test_load_imports_no_arrow_or_polars(tiny, tmp_path):
    """`tracekit load` starts without pyarrow/polars (0.1-0.3 s of imports it never uses)."""
    code = (
        "import sys; from tracekit.cli import main; "
        f"rc = main(['load', {str(tiny)!r}, '-o', {str(tmp_path / 'o.duckdb')!r}]); "
        "print(sorted(m for m in ('pyarrow', 'polars') if m in sys.modules)); sys.exit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
    with tracekit.open(tmp_path / "o.duckdb") as trace:  # the load wrote the trace's three events
        assert trace.rows("SELECT count(*) FROM events") == [(3,)]


def test_load_then_query_formats(tiny, tmp_path):
    db = tmp_path / "run.duckdb"
    res = CliRunner().invoke(cli, ["load", str(tiny), "-o", str(db)])
    assert res.exit_code == 0
    assert f"{db}: 1 trace(s), 3 events, 1 GPU ops" in res.output

    table = invoke("query", "gpu_timeline", db, "--wide").output
    assert table.splitlines()[0].split() == [
        "trace",
        "gpu_ops",
        "linked_gpu_ops",
        "orphan_gpu_ops",
        "counted_gpu_ops",
        "busy_µs",
        "span_µs",
        "idle_µs",
        "busy_pct",
    ]
    assert table.splitlines()[2].split() == ["tiny_rank3", "1", "1", "0", "1", "3.5", "3.5", "0.0", "100.0"]
    # Without --wide the table fits 100 columns and names what it left out.
    narrow = invoke("query", "gpu_timeline", db).output
    assert max(len(line) for line in narrow.splitlines()) <= 100
    # Op counts go before the times (humanize.fit), a mostly-zero one first.
    (wide_line,) = [line for line in narrow.splitlines() if "with --wide:" in line]
    assert wide_line.endswith("with --wide: counted_gpu_ops)")

    rows = list(csv.DictReader(io.StringIO(invoke("query", "gpu_timeline", db, "-f", "csv").output)))
    assert rows == [
        {
            "trace": "tiny_rank3",
            "gpu_ops": "1",
            "linked_gpu_ops": "1",
            "orphan_gpu_ops": "0",
            "counted_gpu_ops": "1",
            "busy_ns": "3500",
            "span_ns": "3500",
            "idle_ns": "0",
            "busy_pct": "100.0",
        }
    ]

    data = json.loads(invoke("sql", db, "SELECT name, cpu_op_name, launch_api FROM gpu_ops", "-f", "json").output)
    assert data == [{"name": "gemm", "cpu_op_name": "aten::mm", "launch_api": "cudaLaunchKernel"}]

    out = tmp_path / "k.parquet"
    assert invoke("query", "top_kernels", db, "-f", "parquet", "-o", out).exit_code == 0
    assert pq.read_table(out).to_pylist()[0]["total_ns"] == 3500
    rank = invoke("sql", db, "SELECT rank, rank_source FROM traces", "-f", "csv").output
    assert rank == "rank,rank_source\n3,file name\n"


def test_raw_trace_is_cached(tiny, monkeypatch):
    first = invoke("sql", tiny, "SELECT count(*) AS n FROM events", "-f", "csv")
    assert first.output == "n\n3\n"

    def boom(*a, **k):
        raise AssertionError("the cached database should have been used")

    monkeypatch.setattr(scan, "stage", boom)
    assert invoke("sql", tiny, "SELECT count(*) AS n FROM events", "-f", "csv").output == "n\n3\n"
    # A changed file is re-read.
    tiny.write_text(json.dumps({"traceEvents": EVENTS[:2]}))
    with pytest.raises(AssertionError, match="cached database"):
        invoke("sql", tiny, "SELECT count(*) FROM events")


def test_errors_are_one_line_but_sql_keeps_duckdbs_whole_message(tiny, capsys):
    assert main(["query", "no_such_query", str(tiny)]) == 1
    assert capsys.readouterr().err == "Error: no query named 'no_such_query' (run 'tracekit queries' to list them)\n"
    assert main(["query", "gpu_timeline", str(tiny), "-p", "include_orphans=maybe"]) == 1
    assert "parameter 'include_orphans' must be BOOLEAN, got 'maybe'" in capsys.readouterr().err
    # SQL errors keep DuckDB's whole message: the candidates / "Did you mean" and the caret.
    assert main(["sql", str(tiny), "SELECT nope FROM gpu_ops"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: Binder Error: ") and "nope" in err and "Candidate bindings:" in err
    assert main(["sql", str(tiny), "SELEC 1"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == 'Error: Parser Error: syntax error at or near "SELEC"'
    assert err[1:] == ["LINE 1: SELEC 1", "        ^^^^^"]
    assert main(["--debug", "sql", str(tiny), "SELECT nope FROM gpu_ops"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_queries_and_tables_listings(tiny):
    listing = invoke("queries").output
    for name in ("core.event_counts", "core.gpu_timeline", "core.top_kernels"):
        assert name in listing
    verbose = invoke("queries", "-v").output
    assert "-p include_orphans=False  (BOOLEAN)" in verbose
    rows = list(csv.DictReader(io.StringIO(invoke("tables", tiny, "--columns", "-f", "csv").output)))
    gpu_cols = {r["column"]: r["doc"] for r in rows if r["table"] == "gpu_ops"}
    assert gpu_cols["orphan"].startswith("Launched before the trace began")


def test_user_query_folder(tiny, tmp_path, monkeypatch):
    folder = tmp_path / "myq"
    folder.mkdir()
    (folder / "slow.sql").write_text(
        "-- Kernels over a threshold.\n--\n-- @param min_ns BIGINT = 0   Threshold, ns.\n"
        "-- @column name VARCHAR   Kernel.\nSELECT name FROM gpu_ops WHERE dur_ns > $min_ns ORDER BY name;\n"
    )
    assert invoke("query", "slow", tiny, "--queries", folder, "-f", "csv").output == "name\ngemm\n"
    monkeypatch.setenv("TRACEKIT_QUERY_PATH", str(folder))
    assert invoke("query", "slow", tiny, "-p", "min_ns=4000", "-f", "csv").output == "name\n"
    (folder / "bad.sql").write_text("-- Bad.\n-- @column x BIGINT  x\nSELECT $oops AS x;\n")
    # One broken file is reported by name when run; the folder's other queries still work.
    assert invoke("query", "slow", tiny, "-p", "min_ns=4000", "-f", "csv").output == "name\n"
    res = CliRunner().invoke(cli, ["query", "bad", str(tiny)])
    assert res.exit_code != 0
    assert f"{folder / 'bad.sql'}:3: parameter $oops is used but not declared" in str(res.exception)


def test_cache_is_rebuilt_when_the_rules_change(tiny, tmp_path, monkeypatch):
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    monkeypatch.setenv("TRACEKIT_RULES_PATH", str(rules_dir))
    query = ["sql", tiny, "SELECT stage FROM gpu_op_stages", "-f", "csv"]
    assert invoke(*query).output == "stage\nother\n"
    (rules_dir / "kernel_stages.csv").write_text(
        "pattern,stage,impl,context,attention,note\n^gemm$,softmax,,any,yes,test rule\n"
    )
    assert invoke(*query).output == "stage\nsoftmax\n"


def test_progress_shows_on_a_terminal_and_stays_quiet_when_piped(monkeypatch):
    import io

    from tracekit.present import console as cli_module

    class Tty(io.StringIO):
        def isatty(self):
            return True

    for stream, expect_output in ((Tty(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stream)
        progress = cli_module.Progress(True)
        progress(64 << 20, 128 << 20, "/data/rank0.json.gz")
        progress.close()
        text = stream.getvalue()
        assert ("loading  50.0%  67/134 MB  rank0.json.gz" in text) is expect_output
        assert (text == "") is not expect_output
    monkeypatch.setattr(sys, "stderr", Tty())
    small = cli_module.Progress(True)
    assert small.enabled
    small(1, 2, "tiny.json")  # under 32 MB: loads fast, no progress line
    assert sys.stderr.getvalue() == ""
    small(16_000, 640_000, "rank3.json", files=(4, 64))  # many small files: files done / total and bytes
    assert "loading   2.5%  4/64 files  0.0/0.6 MB  rank3.json" in sys.stderr.getvalue()


def test_first_use_linking_shows_a_status_line_on_a_terminal(tiny, tmp_path, monkeypatch):
    import io

    from tracekit import cli as cli_module

    class Tty(io.StringIO):
        def isatty(self):
            return True

    db = tmp_path / "t.duckdb"
    assert main(["load", str(tiny), "-o", str(db), "-q"]) == 0
    for sql, shown in (("SELECT count(*) FROM events", False), ("SELECT count(*) FROM gpu_ops", True)):
        monkeypatch.setattr(sys, "stderr", Tty())
        trace = cli_module.open_source(str(db))
        trace.rows(sql)
        trace.close()
        assert ("linking t.duckdb:" in sys.stderr.getvalue()) is shown
