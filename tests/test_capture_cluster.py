"""Rank, host and job naming on clusters, --ranks filtering and atomic writes."""

from __future__ import annotations

import gzip
import json
import socket

import pytest
from conftest import capture_tiny_attention, tiny_attention_args

from capture import cluster as cl
from capture.errors import CaptureError


def test_rank_world_and_job_from_torchrun_env(clean_env):
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "none"}
    info = cl.detect_cluster(env)
    assert (info.rank, info.world_size, info.local_rank, info.job_id) == (3, 8, 1, None)
    assert info.host == socket.gethostname()


def test_rank_and_job_from_slurm_env():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "4242"}
    info = cl.detect_cluster(env)
    assert (info.rank, info.world_size, info.local_rank, info.job_id) == (5, 16, 1, "4242")


def test_rank_from_openmpi_and_pmi_env():
    assert cl.detect_cluster({"OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_SIZE": "9"}).rank == 7
    assert cl.detect_cluster({"PMI_RANK": "2", "PBS_JOBID": "99.pbs"}).job_id == "99.pbs"
    # torchrun's RANK wins over the scheduler's SLURM_PROCID when both are set.
    assert cl.detect_cluster({"RANK": "1", "SLURM_PROCID": "0"}).rank == 1


def test_unknown_rank_is_written_as_rank00000_but_unique(tmp_path):
    info = cl.detect_cluster({})
    assert info.rank is None and info.file_rank == 0
    first = cl.trace_path(tmp_path, "t", info, name="naive", now=0)
    first.parent.mkdir(parents=True)
    first.write_bytes(b"")
    second = cl.trace_path(tmp_path, "t", info, name="naive", now=0)
    assert first != second
    assert first.name.startswith("rank00000.") and second.name.startswith("rank00000.")


def test_two_simulated_ranks_write_different_files(tmp_path):
    ranks = [
        cl.detect_cluster({"RANK": "0"}),
        cl.detect_cluster({"RANK": "1"}),
        cl.detect_cluster({"SLURM_PROCID": "1"}),
    ]
    paths = [cl.trace_path(tmp_path, "job", info, name="flash", now=1_700_000_000) for info in ranks]
    assert len(set(paths)) == 3
    host = cl.safe_token(socket.gethostname().split(".")[0])
    assert paths[0].name.startswith(f"rank00000.{host}.flash.20231114T221320Z-")
    assert paths[1].name.startswith(f"rank00001.{host}.flash.")
    assert all(p.parent == tmp_path / "job" and p.name.endswith(".json.gz") for p in paths)


def test_host_with_dots_becomes_one_field():
    info = cl.ClusterInfo(rank=12, world_size=None, local_rank=None, host="gpu-a17.cluster.example", job_id=None)
    path = cl.trace_path("out", "tag", info, now=0)
    assert path.name.split(".")[:2] == ["rank00012", "gpu-a17"]


def test_parse_ranks_and_should_record():
    assert cl.parse_ranks(None) is None and cl.parse_ranks("") is None
    assert cl.parse_ranks("0,3") == {0, 3}
    assert cl.parse_ranks("0-2, 8") == {0, 1, 2, 8}
    with pytest.raises(CaptureError, match="bad --ranks"):
        cl.parse_ranks("0,x")
    with pytest.raises(CaptureError):
        cl.parse_ranks("3-1")
    ranks = cl.parse_ranks("0,3")
    assert cl.should_record(cl.detect_cluster({"RANK": "3"}), ranks)
    assert not cl.should_record(cl.detect_cluster({"RANK": "1"}), ranks)
    assert cl.should_record(cl.detect_cluster({}), ranks)  # unknown rank counts as 0
    assert cl.should_record(cl.detect_cluster({"RANK": "1"}), None)


def test_atomic_gzip_leaves_no_temp_files(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps({"traceEvents": []}))
    target = cl.gzip_into(raw, tmp_path / "sub" / "x.json.gz")
    assert json.loads(gzip.decompress(target.read_bytes())) == {"traceEvents": []}
    assert [p.name for p in target.parent.iterdir()] == ["x.json.gz"]

    def boom(fh):
        fh.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        cl.atomic_write(tmp_path / "sub" / "y.txt", boom)
    assert [p.name for p in target.parent.iterdir()] == ["x.json.gz"]


def test_ranks_filter_records_only_listed_ranks(tmp_path, clean_env, capsys):
    pytest.importorskip("torch")
    from capture.cli import main

    args = tiny_attention_args("naive", tmp_path, "--tag", "t", "--ranks", "0,3")
    for rank in ("0", "1", "3"):
        clean_env.setenv("RANK", rank)
        clean_env.setenv("WORLD_SIZE", "4")
        assert main(args) == 0
    out = capsys.readouterr().out
    assert "rank 1 not in --ranks 0,3: ran without recording" in out
    traces = sorted(p.name.split(".")[0] for p in (tmp_path / "t").glob("*.json.gz"))
    assert traces == ["rank00000", "rank00003"]
    metas = [
        json.loads(gzip.decompress(p.read_bytes()))["tracekit_capture"]
        for p in sorted((tmp_path / "t").glob("*.json.gz"))
    ]
    assert [(m["rank"], m["world_size"]) for m in metas] == [(0, 4), (3, 4)]


def test_slurm_ranks_write_different_files(tmp_path, clean_env):
    pytest.importorskip("torch")
    clean_env.setenv("SLURM_JOB_ID", "777")
    paths = []
    for rank in ("0", "1"):
        clean_env.setenv("SLURM_PROCID", rank)
        result = capture_tiny_attention("auto", tmp_path, "slurm").result
        paths.append(result.trace)
        assert json.loads(gzip.decompress(result.trace.read_bytes()))["tracekit_capture"]["job_id"] == "777"
    assert paths[0] != paths[1]
    assert [p.name[:9] for p in paths] == ["rank00000", "rank00001"]


def test_all_reduce_outside_a_launcher_is_one_error(tmp_path, clean_env, capsys):
    pytest.importorskip("torch")
    from capture.cli import main

    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        clean_env.delenv(name, raising=False)
    assert main(tiny_attention_args("math", tmp_path, "--all-reduce")) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "Error: --all-reduce needs a launcher's process group (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE not set): "
        "run under torchrun, e.g. torchrun --nproc-per-node 2 -m capture attention --all-reduce ..."
    ]
    assert not any(tmp_path.rglob("*.json.gz"))


@pytest.mark.slow  # torchrun starts three Python processes that import torch
def test_torchrun_on_cpu_writes_one_trace_per_rank_whose_collectives_match(tmp_path):
    """capture attention --all-reduce under torchrun (2 ranks, gloo): each rank's trace has distributedInfo and
    its all-reduces, and tracekit matches them across the ranks (on Dask, as a cluster would load them)."""
    pytest.importorskip("torch")
    pytest.importorskip("dask.distributed")
    import subprocess
    import sys
    from pathlib import Path

    import tracekit
    from tracekit.cli import main as tracekit_main

    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.is_file():
        pytest.skip(f"no torchrun beside {sys.executable}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = tiny_attention_args("math", tmp_path / "traces", "--tag", "tr", "--all-reduce", steps=False)
    run = subprocess.run(
        [str(torchrun), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)]
        + ["-m", "tracekit.capture", *args, "--warmup", "1", "--steps", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    files = sorted((tmp_path / "traces" / "tr").glob("*.json.gz"))
    assert [p.name[:9] for p in files] == ["rank00000", "rank00001"]
    for rank, path in enumerate(files):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        info = doc["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, 2)
        names = [e.get("name") for e in doc["traceEvents"]]
        assert names.count("gloo:all_reduce") == 2  # one per profiled step
    out = tmp_path / "ds"
    load = ["load", str(tmp_path / "traces" / "tr"), "-o", str(out), "--parquet", "-q", "--dask", "local:2"]
    assert tracekit_main(load) == 0
    with tracekit.load(out) as t:
        rows = t.query("matched_collectives").to_dicts()
        offsets = t.rows("SELECT rank, clock_source FROM traces ORDER BY rank")
    assert [(r["collective"], r["instance"], r["rank"], r["ranks"], r["matched_on"]) for r in rows] == [
        ("allreduce", i, rank, 2, "order") for i in (0, 1) for rank in (0, 1)
    ]
    assert all(sum(r["last_arrival"] for r in rows if r["instance"] == i) == 1 for i in (0, 1))
    assert offsets == [(0, "reference"), (1, "collective ends")]
