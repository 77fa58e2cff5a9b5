"""Ranks side by side: stragglers, matched collectives, clocks and rank identity.

The jobs are built from the real NCCL trace ``hta/a100_nccl_rank0`` by
``cluster_synthetic.make_job``: one copy per rank with its clock shifted and
one rank arriving late at every collective, so the answers are known by
construction.
"""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner
from cluster_synthetic import make_job
from conftest import capture_tiny_attention, require_shared

import tracekit
from tracekit.cli import cli

OFFSETS = {0: 0, 1: 7_000_000, 2: -30_000_000, 3: 2_500_000, 4: -1_000, 5: 900_000_000}


@pytest.fixture(scope="module")
def source():
    return require_shared() / "hta/a100_nccl_rank0.json.gz"


def _load(folder):
    return tracekit.load(folder)


def test_the_late_rank_comes_first_in_stragglers_whatever_the_clocks(source, tmp_path):
    # Rank 4's clock runs behind the others, so by raw start times it would look early.
    truth = make_job(source, tmp_path / "job", ranks=6, offsets_ns=OFFSETS, late_rank=4, delay_ns=400_000)
    with _load(tmp_path / "job") as t:
        rows = t.query("stragglers").to_dicts()
    assert [r["rank"] for r in rows][0] == 4
    assert len(rows) == 6
    first = rows[0]
    assert first["collectives"] == truth.collectives_per_rank == 21
    assert first["last_arrivals"] == 21
    assert first["wait_caused_ns"] == truth.wait_caused_ns == 5 * sum(truth.delays_ns)
    assert all(r["wait_caused_ns"] == 0 and r["last_arrivals"] == 0 for r in rows[1:])


def test_matched_collectives_agree_across_ranks(source, tmp_path):
    truth = make_job(source, tmp_path / "job", ranks=4, offsets_ns=OFFSETS, late_rank=1)
    with _load(tmp_path / "job") as t:
        rows = t.query("matched_collectives").to_dicts()
    instances: dict[tuple, list[dict]] = {}
    for r in rows:
        instances.setdefault((r["pg"], r["collective"], r["instance"]), []).append(r)
    assert len(instances) == truth.collectives_per_rank
    assert sorted(len(v) for v in instances.values()) == [4] * 21
    skews = []
    for members in instances.values():
        assert sorted(m["rank"] for m in members) == [0, 1, 2, 3]
        assert len({m["kernel"] for m in members}) == 1
        late = [m for m in members if m["last_arrival"]]
        assert [m["rank"] for m in late] == [1]
        # Aligned on the reference clock, every rank ends the collective at the same moment.
        assert len({m["start_ns"] + m["dur_ns"] for m in members}) == 1
        skews.append(late[0]["skew_ns"])
        assert late[0]["arrival_ns"] == late[0]["skew_ns"] and late[0]["wait_ns"] == 0
    assert sorted(skews) == sorted(truth.delays_ns)


def test_clock_offsets_are_recovered_from_collective_ends(source, tmp_path):
    make_job(source, tmp_path / "job", ranks=6, offsets_ns=OFFSETS, late_rank=3)
    with _load(tmp_path / "job") as t:
        rows = t.rows("SELECT rank, clock_offset_ns, clock_source FROM traces ORDER BY rank")
    assert rows == [(0, 0, "reference")] + [(r, OFFSETS[r], "collective ends") for r in range(1, 6)]


@pytest.mark.parametrize("seq_on", ["kernel", "op"])
def test_sequence_numbers_match_ranks_whose_windows_start_later(source, tmp_path, seq_on):
    # Modern names (ncclDevKernel_*, HTA #360) and args Seq (on the kernel, or only on its
    # record_param_comms op); rank 3's profiling began two collectives later.
    make_job(
        source,
        tmp_path / "job",
        ranks=4,
        offsets_ns=OFFSETS,
        late_rank=2,
        modern=True,
        drop_first={3: 2},
        seq_on=seq_on,
    )
    with _load(tmp_path / "job") as t:
        rows = t.query("matched_collectives").to_dicts()
        stragglers = t.query("stragglers").to_dicts()
        offsets = dict(t.rows("SELECT rank, clock_offset_ns FROM traces"))
    assert all(r["kernel"].startswith("ncclDevKernel_") for r in rows)
    assert {r["instance"] for r in rows if r["ranks"] == 3} == {0, 1}
    assert all(r["ranks"] == 4 for r in rows if r["instance"] >= 2)
    assert all(r["rank"] == 2 for r in rows if r["last_arrival"])
    assert stragglers[0]["rank"] == 2
    assert [s["collectives"] for s in sorted(stragglers, key=lambda s: s["rank"])] == [21, 21, 21, 19]
    assert offsets == {r: OFFSETS[r] for r in range(4)}


def test_rank_summary_has_one_row_per_rank(source, tmp_path):
    truth = make_job(source, tmp_path / "job", ranks=3, offsets_ns=OFFSETS, late_rank=0)
    with _load(tmp_path / "job") as t:
        rows = t.query("rank_summary").to_dicts()
        single = tracekit.load(source).query("rank_summary").to_dicts()[0]
    assert [r["rank"] for r in rows] == [0, 1, 2]
    assert [r["host"] for r in rows] == ["node0", "node0", "node1"]
    assert all(r["steps"] == 3 for r in rows)
    # The late rank's collective kernels are shorter by its delays; the others match the original rank.
    assert rows[1]["comm_ns"] == rows[2]["comm_ns"] == single["comm_ns"]
    assert rows[0]["comm_ns"] == single["comm_ns"] - sum(truth.delays_ns)
    assert 0 < rows[1]["exposed_comm_ns"] <= rows[1]["comm_ns"] <= rows[1]["gpu_busy_ns"]


def test_identity_written_by_the_capture_module_is_read_back(source, tmp_path):
    make_job(source, tmp_path / "job", ranks=2, late_rank=None, job="777")
    with _load(tmp_path / "job") as t:
        rows = t.rows("SELECT rank, world_size, local_rank, job, host FROM traces ORDER BY rank")
    assert rows == [(0, 2, 0, "777", "node0"), (1, 2, 1, "777", "node0")]


def test_host_and_rank_from_a_capture_layout_file_name(tmp_path):
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}
    path = tmp_path / "t" / "rank00007.gpu-a17.flash.20231114T221320Z-123-0.json.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with tracekit.load(path) as t:
        assert t.rows("SELECT rank, rank_source, host FROM traces") == [(7, "file name", "gpu-a17")]


def test_two_traces_claiming_one_rank_of_one_job_warn(source, tmp_path):
    make_job(source, tmp_path / "a", ranks=2, late_rank=None, job="9")
    make_job(source, tmp_path / "b", ranks=1, late_rank=None, job="9")
    out = tmp_path / "run.duckdb"
    result = CliRunner().invoke(cli, ["load", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 traces claim rank 0 of job 9: a/rank0, b/rank0" in result.output
    with tracekit.open(out) as t:  # both claims are kept as they were written: a warning, not a change
        rows = t.rows("SELECT trace, rank, world_size, job FROM traces ORDER BY trace_id")
    assert rows == [("a/rank0", 0, 2, "9"), ("rank1", 1, 2, "9"), ("b/rank0", 0, 1, "9")]
    other = CliRunner().invoke(cli, ["load", str(tmp_path / "a"), "-o", str(tmp_path / "ok.duckdb")])
    assert "claim rank" not in other.output


def test_rank_column_in_stage_breakdown_and_attention_calls(source, tmp_path):
    make_job(source, tmp_path / "job", ranks=2, late_rank=None)
    with _load(tmp_path / "job") as t:
        stages = t.query("stage_breakdown").to_dicts()
        calls = t.query_arrow("attention_calls")
    assert {(r["trace"], r["rank"]) for r in stages} == {("rank0", 0), ("rank1", 1)}
    assert calls.column_names[:3] == ["trace", "rank", "call_id"]


def test_ranks_recorded_by_the_capture_module_are_read_back(tmp_path, clean_env):
    # Two ranks of a Slurm job recorded on CPU by capture/: rank, local rank, job and host come back.
    pytest.importorskip("torch")
    import socket

    clean_env.setenv("SLURM_JOB_ID", "31337")
    clean_env.setenv("SLURM_NTASKS", "2")
    for rank in (0, 1):
        clean_env.setenv("SLURM_PROCID", str(rank))
        clean_env.setenv("SLURM_LOCALID", str(rank))
        capture_tiny_attention("naive", tmp_path, "job")
    with tracekit.load(tmp_path / "job") as t:
        rows = t.rows("SELECT rank, rank_source, world_size, local_rank, job, host FROM traces ORDER BY rank")
        stragglers = t.query("stragglers").to_dicts()
    assert rows == [(r, "tracekit_capture", 2, r, "31337", socket.gethostname()) for r in (0, 1)]
    assert [(s["rank"], s["collectives"]) for s in stragglers] == [(0, 0), (1, 0)]
