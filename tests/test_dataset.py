"""Parquet datasets written by load --parquet (here on a Dask LocalCluster) answer like a .duckdb."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sys
from pathlib import Path

import duckdb
import pytest
from cluster_synthetic import GOLDEN_JOB, make_job
from conftest import require_shared
from synthetic import post_variants

import tracekit
from tracekit import api
from tracekit.cli import main
from tracekit.library import queries
from tracekit.schema import catalog
from tracekit.store import database, dataset, pipeline

SHIPPED = sorted(q.id for q in queries.library().values())
# Two real traces of other kinds beside the ranks, so the merged ids really shift: BERT's SDPA calls, and a
# ViT whose nn.Module scopes give python_functions parents, call ids from module scopes and decider ids.
SHARED = ("tracelens/h100_bert-small_sdpa-flash.json.gz", "tracelens/mi300_falconsai_vit_sdpa_modules.json.gz")


def model_rows(trace) -> dict[str, list]:
    """Every row of every table and view of the linked model (pipeline.NAMES), ordered by all columns, and of
    the base tables (traces without loaded_on: which process parsed the file)."""
    rows = {name: trace.rows(f"SELECT * FROM {name} ORDER BY ALL") for name in pipeline.NAMES}
    rows["traces"] = trace.rows("SELECT * EXCLUDE (loaded_on) FROM traces ORDER BY ALL")
    for name in ("devices", "events"):
        rows[name] = trace.rows(f"SELECT * FROM {name} ORDER BY ALL")
    return rows


def assert_same_rows(a: dict[str, list], b: dict[str, list]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert a[name] == b[name], name


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Four NCCL ranks of one job (skewed clocks, a late rank), two synthetic attention traces and two
    shared ones, in one folder."""
    folder = tmp_path_factory.mktemp("job")
    make_job(require_shared() / "hta/a100_nccl_rank0.json.gz", folder / "ranks", **GOLDEN_JOB)
    variants = post_variants(["flash", "math"])
    (folder / "attention").mkdir()
    for name, v in variants.items():
        v.write(folder / "attention" / f"{name}.json.gz")
    (folder / "shared").mkdir()
    for rel in SHARED:
        (folder / "shared" / Path(rel).name).write_bytes((require_shared() / rel).read_bytes())
    return folder


@pytest.fixture(scope="module")
def one_process(job, tmp_path_factory) -> Path:
    """The job loaded in one process into a .duckdb (one build ingests every file, where tracekit.load(output=)
    runs one task per file), the linked model built once over the whole database."""
    path = database.build_file([job], tmp_path_factory.mktemp("one") / "one.duckdb")
    assert database.link_file(path)
    return path


@pytest.fixture(scope="module")
def reference(one_process):
    """The rows of the job loaded in one process, the linked model built once over the whole database."""
    with tracekit.open(one_process) as one:
        assert one.linked
        rows = model_rows(one)
    assert len(rows["traces"]) == 8
    for name in ("cpu_slices", "gpu_ops", "python_functions", "collectives", "attention_calls", "cpu_stages"):
        assert rows[name], name
    return rows


# Slow (19 s with its setup); every run keeps tests/test_parallel.py's jobs-against-one-process rows.
@pytest.mark.slow
def test_linked_in_worker_processes_the_rows_are_those_of_one_link(job, reference, tmp_path):
    """load --jobs 2 --link: the workers parse runs of files, the merge shifts every id column the schema
    declares, one link over the merged tables."""
    out = tmp_path / "many.duckdb"
    assert main(["load", str(job), "-o", str(out), "--jobs", "2", "--link", "-q"]) == 0
    with tracekit.open(out) as many:
        assert many.rows("SELECT value FROM tracekit_info WHERE key = 'linked'") == [("true",)]
        assert len(many.rows("SELECT DISTINCT loaded_on FROM traces")) == 2
        assert_same_rows(reference, model_rows(many))


def test_a_dataset_holds_the_linked_tables_of_one_link(job, reference, tmp_path):
    """load --parquet links in each task and writes the linked tables as partitions: open() reads them."""
    out = tmp_path / "dataset"
    assert main(["load", str(job), "-o", str(out), "--parquet", "--jobs", "2", "-q"]) == 0
    assert (out / "cpu_slices" / "trace_id=8" / "data.parquet").is_file()
    assert (out / "rule_op_stages" / "data.parquet").is_file()
    with tracekit.load(out) as ds:
        assert ds.linked  # read from the files, not built on first use
        assert_same_rows(reference, model_rows(ds))


def test_a_dataset_without_its_linked_tables_is_linked_on_first_use(job, tmp_path):
    """The fallback: a manifest that does not list the linked tables (a dataset written before they were)."""
    out = tmp_path / "dataset"
    assert main(["load", str(job / "attention"), "-o", str(out), "--parquet", "--jobs", "1", "-q"]) == 0
    with tracekit.load(out) as ds:
        assert ds.linked
        stored = ds.query("stage_breakdown").to_dicts()
    manifest = json.loads((out / "tracekit_dataset.json").read_text())
    manifest["linked"] = False
    (out / "tracekit_dataset.json").write_text(json.dumps(manifest))
    with tracekit.load(out) as ds:
        assert not ds.linked
        assert ds.query("stage_breakdown").to_dicts() == stored
        assert ds.linked  # built in memory by the query
    assert stored


# Slow (a LocalCluster and every query, 24 s of one worker): every run keeps a Dask load through
# tests/test_dask_cluster.py's cluster started from the shell.
@pytest.mark.slow
def test_a_dataset_loaded_on_dask_answers_every_query_like_a_duckdb(job, one_process, reference, tmp_path, capsys):
    pytest.importorskip("dask.distributed")
    out = tmp_path / "dataset"
    assert main(["load", str(job), "-o", str(out), "--parquet", "--dask", "local:2", "-q"]) == 0
    assert dataset.is_dataset(out)
    tables = [n for n in pipeline.NAMES if catalog.TABLES[n].kind == "table"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["devices", "events", "tracekit_dataset.json", "traces", *tables]
    )
    assert sorted(p.name for p in (out / "events").iterdir()) == [f"trace_id={i}" for i in range(1, 9)]
    one = tracekit.open(one_process)
    ds = tracekit.load(out)
    try:
        # Two Dask worker processes parsed the files.
        assert len(ds.rows("SELECT DISTINCT loaded_on FROM traces")) == 2
        for name in SHIPPED:
            a, b = one.query_arrow(name), ds.query_arrow(name)
            assert a.schema == b.schema, name
            assert a.to_pylist() == b.to_pylist(), name
        same = "SELECT * EXCLUDE (loaded_on) FROM traces ORDER BY trace_id"
        assert one.rows(same) == ds.rows(same)
        assert_same_rows(reference, model_rows(ds))
    finally:
        one.close()
        ds.close()
    manifest = json.loads((out / "tracekit_dataset.json").read_text())
    assert [t["trace_id"] for t in manifest["traces"]] == list(range(1, 9))


def test_a_bad_rank_is_reported_and_the_dataset_holds_the_others(job, tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    for p in sorted((job / "attention").iterdir()):
        (src / p.name).write_bytes(p.read_bytes())
    (src / "rank7.json").write_text("{not json")
    out = tmp_path / "ds"
    assert main(["load", str(src), "-o", str(out), "--parquet", "--jobs", "2"]) == 1
    err = capsys.readouterr().err
    assert "rank7.json" in err and "1 of 3 trace files failed to load" in err
    with tracekit.load(out) as t:
        assert t.rows("SELECT trace FROM traces ORDER BY trace_id") == [("flash",), ("math",)]
    assert not (out / ".staging").exists()


def test_a_folder_without_its_manifest_is_not_a_dataset(job, tmp_path, capsys):
    out = tmp_path / "ds"
    assert main(["load", str(job / "attention"), "-o", str(out), "--parquet", "--jobs", "1", "-q"]) == 0
    (out / "tracekit_dataset.json").unlink()
    assert main(["query", "gpu_timeline", str(out)]) == 1
    # Read as a folder of raw traces, not as a dataset: one line naming it.
    assert capsys.readouterr().err == f"Error: {out}: directory holds no *.json or *.json.gz files\n"


def test_missing_dask_names_the_extra(job, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)
    out = tmp_path / "ds"
    assert main(["load", str(job / "attention"), "-o", str(out), "--parquet", "--dask", "local:2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["Error: --dask needs Dask: pip install 'tracekit-attn[dask]' (dask and distributed)"]
    assert not out.exists()


def test_a_folder_of_only_non_traces_is_the_error_a_duckdb_load_gives(tmp_path, capsys):
    """--parquet said 'none of the 0 trace files loaded' when every file was skipped (no failure to list)."""
    folder = tmp_path / "only"
    folder.mkdir()
    (folder / "a.json").write_text('{"manifest": 1}')
    (folder / "b.json").write_text('{"manifest": 2}')
    errors = []
    for out in (tmp_path / "x.duckdb", tmp_path / "ds"):
        assert main(["load", str(folder), "-o", str(out), "-q", *(["--parquet"] if out.suffix == "" else [])]) == 1
        errors.append(capsys.readouterr().err.strip().splitlines()[-1])
        assert not out.exists()
    assert errors[0] == errors[1] == f"Error: {folder}: no traces to load"


def test_force_replaces_a_dataset_and_fills_an_empty_folder(tmp_path, capsys):
    """--parquet --force was refused by the regular-file check of a .duckdb output ('is a directory')."""
    trace = tmp_path / "math.json.gz"
    post_variants(["math"])["math"].write(trace)
    out, empty = tmp_path / "ds", tmp_path / "empty"
    empty.mkdir()
    assert main(["load", str(trace), "-o", str(out), "--parquet", "-q"]) == 0
    assert main(["load", str(trace), "-o", str(out), "--parquet", "-q"]) == 1
    assert "already exists" in capsys.readouterr().err
    for folder in (out, empty):
        assert main(["load", str(trace), "-o", str(folder), "--parquet", "-q", "--force"]) == 0, capsys.readouterr()
        with api.open_dataset(folder) as ds:
            assert ds.rows("SELECT count(*) FROM traces") == [(1,)]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    assert main(["load", str(trace), "-o", str(tmp_path / "other"), "--parquet", "-q", "--force"]) == 1
    assert "not a tracekit dataset" in capsys.readouterr().err
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"


def test_a_dataset_load_caps_each_task_at_the_memory_limit(job, tmp_path, monkeypatch, capsys):
    """load --parquet --memory-limit reaches every task's DuckDB (it was ignored), and a bad size is one
    error before anything is written or --force removes the dataset already there."""
    seen = []
    connect = duckdb.connect

    def recording(database=":memory:", *args, config=None, **kwargs):
        if (config or {}).get("temp_directory"):  # a task's in-memory DuckDB (parallel.load_part, export)
            seen.append(config.get("memory_limit"))
        return connect(database, *args, config=config or {}, **kwargs)

    monkeypatch.setattr(duckdb, "connect", recording)
    out = tmp_path / "dataset"
    src = job / "attention"
    assert main(["load", str(src), "-o", str(out), "--parquet", "--jobs", "1", "--memory-limit", "300MB", "-q"]) == 0
    assert seen and set(seen) == {"300MB"}
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    code = main(["load", str(src), "-o", str(out), "--parquet", "--force", "--memory-limit", "lots", "-q"])
    assert code == 1
    assert "--memory-limit='lots'" in capsys.readouterr().err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


# Some ranks of a source (--rank/--trace, tracekit.load(ranks=, traces=)): four small GPU traces as ranks 0-3.
RANK_TRACES = ("flash", "math", "inplace", "naive")


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> dict[str, Path]:
    """The same four ranks of one job as a Parquet dataset, an unlinked .duckdb and a linked one."""
    root = tmp_path_factory.mktemp("four_ranks")
    samples = Path(__file__).resolve().parent.parent / "sample_traces" / "gpu_a100_synthetic"
    (root / "ranks").mkdir()
    for rank, name in enumerate(RANK_TRACES):
        doc = json.loads(gzip.decompress((samples / f"{name}.json.gz").read_bytes()))
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": len(RANK_TRACES)}
        (root / "ranks" / f"rank{rank}.json").write_text(json.dumps(doc))
    dataset.build([root / "ranks"], root / "ds", jobs=1)
    unlinked = database.build_file([root / "ranks"], root / "unlinked.duckdb")
    linked = root / "linked.duckdb"
    linked.write_bytes(unlinked.read_bytes())
    assert database.link_file(linked)
    return {"ranks": root / "ranks", "ds": root / "ds", "unlinked": unlinked, "linked": linked}


def rows_of(trace, trace_ids=None) -> dict[str, list]:
    """``model_rows``; with ``trace_ids``, of the tables with a trace_id column only, their rows of those
    traces (the others, kernel_precision_classes, hold what the traces read hold)."""
    rows = {}
    for name in (*pipeline.NAMES, "traces", "devices", "events"):
        columns = [row[0] for row in trace.rows(f"DESCRIBE {name}")]
        if trace_ids and "trace_id" not in columns:
            continue
        where = f"WHERE trace_id IN ({', '.join(map(str, trace_ids))})" if trace_ids else ""
        kept = " EXCLUDE (loaded_on)" if name == "traces" else ""
        rows[name] = trace.rows(f"SELECT *{kept} FROM {name} {where} ORDER BY ALL")
    return rows


def assert_same_selected(expected: dict[str, list], selected: dict[str, list], first: dict | None) -> dict:
    """``selected`` holds ``expected``'s rows, and those of every other table of the ``first`` selection's."""
    assert_same_rows(expected, {name: selected[name] for name in expected})
    if first is not None:
        assert_same_rows(first, selected)
    return selected


def test_selected_ranks_read_the_rows_of_the_whole_source_filtered_to_them(four_ranks):
    """Ids included: a dataset's selection and a .duckdb's (linked on first use, in memory, over those ranks
    only; or read from the file) hold the full source's rows of those traces."""
    with tracekit.load(four_ranks["ds"]) as whole:
        ids = [t for (t,) in whole.rows("SELECT trace_id FROM traces WHERE rank IN (1, 3) ORDER BY 1")]
        expected = rows_of(whole, ids)
    assert ids == [2, 4] and expected["gpu_ops"] and expected["attention_calls"]
    with tracekit.load(four_ranks["ds"], ranks="1,3") as ds:
        assert ds.linked and ds.selected == "2 of 4 traces (--rank 1,3)"
        first = assert_same_selected(expected, rows_of(ds), None)
    assert len(first) > len(expected)
    with tracekit.load(four_ranks["unlinked"], ranks=[3, 1]) as db:
        assert not db.linked
        assert_same_selected(expected, rows_of(db), first)  # linked now, over ranks 1 and 3
    with tracekit.open(four_ranks["linked"], traces=["rank1", "rank3"]) as db:
        assert db.linked and db.selected == "2 of 4 traces (--trace rank1 --trace rank3)"
        assert_same_selected(expected, rows_of(db), first)
    with tracekit.open(four_ranks["unlinked"]) as db:
        assert not db.linked  # the file was only read


def test_a_selected_dataset_opens_only_its_partitions(four_ranks):
    def scanned(trace) -> tuple[int, list[str]]:
        plan = trace.rows("EXPLAIN ANALYZE SELECT count(*), sum(dur_ns) FROM events")[0][1]
        return int(re.search(r"Total Files Read: (\d+)", plan)[1]), re.findall(r"trace_id=(\d+)/data\.parquet", plan)

    with tracekit.load(four_ranks["ds"]) as whole:
        assert scanned(whole)[0] == 4
    with tracekit.load(four_ranks["ds"], ranks=[2]) as ds:
        assert scanned(ds) == (1, ["3"])
        # Every table's view lists that partition alone.
        for (sql,) in ds.rows("SELECT sql FROM duckdb_views() WHERE sql LIKE '%read_parquet([%'"):
            assert re.findall(r"trace_id=(\d+)/", sql) == ["3"], sql


def test_the_cli_selects_alike_on_a_dataset_and_a_duckdb(four_ranks, capsys):
    outs = []
    for source in (four_ranks["ds"], four_ranks["linked"]):
        assert main(["query", "stage_breakdown", str(source), "--rank", "0", "--rank", "2-3", "-f", "csv"]) == 0
        out, err = capsys.readouterr()
        outs.append(out)
        assert err.splitlines()[0] == f"Note: {source}: reading 3 of 4 traces (--rank 0,2-3)"
        assert main(["query", "rank_summary", str(source), "--trace", "rank1", "-f", "csv"]) == 0
        assert "Note: 1 of world_size 4 ranks present (1): the cross-rank figures cover only these" in (
            capsys.readouterr().err
        )
    assert outs[0] == outs[1] and "rank1" not in outs[0] and "rank2" in outs[0]


@pytest.mark.parametrize("source", ["ds", "linked"])
def test_an_unknown_rank_or_label_is_one_line_naming_the_source_and_what_it_holds(four_ranks, source, capsys):
    path = four_ranks[source]
    assert main(["query", "stage_breakdown", str(path), "--rank", "3-5"]) == 1
    assert capsys.readouterr().err == f"Error: {path}: no ranks 4-5 (ranks present: 0-3)\n"
    assert main(["stages", str(path), "--trace", "rank9"]) == 1
    assert capsys.readouterr().err == f"Error: {path}: no trace labelled 'rank9' (traces: rank0, rank1, rank2, rank3)\n"
    assert main(["sql", str(path), "SELECT 1", "--rank", "1", "--trace", "rank2"]) == 1
    assert capsys.readouterr().err == f"Error: {path}: no trace matches both --rank 1 and --trace rank2\n"


def test_a_dataset_reads_partitions_by_position_only_where_every_partition_matches(four_ranks, tmp_path):
    """Views bind on one file's schema (union_by_name = false) only for the tables the manifest calls
    uniform; a table whose partitions differ (here one written with its columns reversed, as a manifest
    without "uniform" may hold) is read by name, with the same rows."""
    manifest = json.loads((four_ranks["ds"] / dataset.MANIFEST).read_text())
    assert set(manifest["uniform"]) == set(manifest["tables"])  # one tracekit wrote every partition
    with tracekit.load(four_ranks["ds"]) as whole:
        expected = whole.rows("SELECT * FROM gpu_ops ORDER BY ALL")
        view = whole.rows("SELECT sql FROM duckdb_views() WHERE view_name = 'gpu_ops'")[0][0]
    assert expected and "union_by_name = false" in view
    copy = tmp_path / "ds"
    shutil.copytree(four_ranks["ds"], copy)
    part = copy / "gpu_ops" / "trace_id=2" / "data.parquet"
    con = duckdb.connect()
    names = [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{part}')").fetchall()]
    reordered = ", ".join(reversed(names))
    con.execute(f"COPY (SELECT {reordered} FROM read_parquet('{part}')) TO '{part}.new' (FORMAT parquet)")
    con.close()
    os.replace(f"{part}.new", part)
    manifest["uniform"].remove("gpu_ops")
    (copy / dataset.MANIFEST).write_text(json.dumps(manifest))
    with tracekit.load(copy) as read:
        assert read.rows("SELECT * FROM gpu_ops ORDER BY ALL") == expected
        view = read.rows("SELECT sql FROM duckdb_views() WHERE view_name = 'gpu_ops'")[0][0]
    assert "union_by_name = true" in view
