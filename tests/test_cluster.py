"""Ranks side by side: stragglers, matched collectives, clocks and rank identity.

The jobs are built from the real NCCL trace ``hta/a100_nccl_rank0`` by
``cluster_synthetic.make_job``: one copy per rank with its clock shifted and
one rank arriving late at every collective (or, in the job set beside HTA,
several ranks each late at its own collectives, one computing inside a
collective), so the answers are known by construction.
"""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner
from cluster_synthetic import HTA_JOB, make_job
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
        assert {m["matched_on"] for m in members} == {"order"}  # no Seq in this trace (PyTorch 2.3)
        assert {m["peer"] for m in members} == {None}
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
    assert {r["matched_on"] for r in rows} == {"Seq"} and {s["matched_on"] for s in stragglers} == {"Seq"}
    assert {r["instance"] for r in rows if r["ranks"] == 3} == {0, 1}
    assert all(r["ranks"] == 4 for r in rows if r["instance"] >= 2)
    assert all(r["rank"] == 2 for r in rows if r["last_arrival"])
    assert stragglers[0]["rank"] == 2
    assert [s["collectives"] for s in sorted(stragglers, key=lambda s: s["rank"])] == [21, 21, 21, 19]
    assert offsets == {r: OFFSETS[r] for r in range(4)}


def test_rank_summary_has_one_row_per_rank_the_worst_first(source, tmp_path):
    truth = make_job(source, tmp_path / "job", ranks=3, offsets_ns=OFFSETS, late_rank=1)
    with _load(tmp_path / "job") as t:
        rows = t.query("rank_summary").to_dicts()
        single = tracekit.load(source).query("rank_summary").to_dicts()[0]
    # The rank the others waited for comes first, then the others (identical copies) by rank.
    assert [r["rank"] for r in rows] == [1, 0, 2]
    assert [r["wait_caused_ns"] for r in rows] == [truth.wait_caused_ns, 0, 0]
    assert [r["host"] for r in rows] == ["node0", "node0", "node1"]
    assert all(r["steps"] == 3 for r in rows)
    # The late rank's collective kernels are shorter by its delays; the others match the original rank.
    assert rows[1]["comm_ns"] == rows[2]["comm_ns"] == single["comm_ns"]
    assert rows[0]["comm_ns"] == single["comm_ns"] - sum(truth.delays_ns)
    assert 0 < rows[1]["exposed_comm_ns"] <= rows[1]["comm_ns"] <= rows[1]["gpu_busy_ns"]


@pytest.fixture(scope="module")
def hta_job(source, tmp_path_factory):
    """The job set beside HTA (bench/compare_hta_ranks.py): its truth and tracekit's cross-rank answers."""
    folder = tmp_path_factory.mktemp("hta_job")
    truth = make_job(source, folder, **HTA_JOB)
    with _load(folder) as t:
        answers = {q: t.query(q).to_dicts() for q in ("comm_overlap", "stragglers", "matched_collectives")}
    return truth, answers


def test_several_late_ranks_each_charged_its_own_collectives(hta_job):
    # Ranks late at different collectives by different delays (docs/cluster.md, "Against HTA").
    truth, answers = hta_job
    stragglers = answers["stragglers"]
    assert [(s["rank"], s["wait_caused_ns"]) for s in stragglers] == [
        (2, 3_000_000),
        (3, 1_800_000),
        (1, 1_500_000),
        (0, 0),
    ]
    assert {s["rank"]: s["wait_caused_ns"] for s in stragglers} == truth.wait_caused_by
    # Where every rank arrived together (skew 0) nobody arrived last: rank 3, the tie-break's pick, is not charged.
    assert {s["rank"]: s["last_arrivals"] for s in stragglers} == {r: len(truth.late_at.get(r, {})) for r in range(4)}
    # Every (collective, rank): arrival and wait as written, the collective matched by its order among its kind.
    order: dict[str, int] = {}
    index = {}
    for i, kind in enumerate(truth.collectives):
        index[(kind, order.setdefault(kind, 0))] = i
        order[kind] += 1
    late = {i: (rank, delay) for rank, at in truth.late_at.items() for i, delay in at.items()}
    rows = answers["matched_collectives"]
    assert len(rows) == 4 * 21
    for r in rows:
        late_rank, delay = late.get(index[(r["collective"], r["instance"])], (None, 0))
        assert r["skew_ns"] == delay
        assert r["arrival_ns"] == (delay if r["rank"] == late_rank else 0)
        assert r["wait_ns"] == (0 if r["rank"] == late_rank else delay)
        assert r["last_arrival"] == (r["rank"] == late_rank)
        assert r["wait_caused_ns"] == (3 * delay if r["rank"] == late_rank else 0)


def test_overlap_per_rank_equals_the_intervals_written(hta_job):
    # HTA's comm/comp overlap: merged communication time, and the part of it computation kernels cover.
    truth, answers = hta_job
    overlap = {r["rank"]: r for r in answers["comm_overlap"]}
    assert {r: (o["comm_ns"], o["overlapped_ns"]) for r, o in overlap.items()} == {
        r: (truth.comm_ns[r], truth.overlapped_ns[r]) for r in range(4)
    }
    # A late rank's collective kernels are shorter by its delays; rank 3 computed through 0.42 ms of a collective.
    assert all(truth.comm_ns[r] == truth.comm_ns[0] - sum(truth.late_at.get(r, {}).values()) for r in range(4))
    assert truth.extra_compute_ns[3] > 400_000
    assert max(overlap, key=lambda r: overlap[r]["overlap_pct"]) == 3


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


@pytest.mark.slow  # four ranks; the two-rank SendRecv test below keeps peer matching in every run
def test_pipeline_sends_and_receives_match_by_peer_and_order(source, tmp_path):
    # Pairs (0, 1) and (2, 3) exchange send/recv (PyTorch records Dst/Src Rank, no usable Seq); rank 3 is late.
    truth = make_job(source, tmp_path / "job", ranks=4, offsets_ns=OFFSETS, late_rank=3, p2p="args")
    with _load(tmp_path / "job") as t:
        rows = t.query("matched_collectives").to_dicts()
        stragglers = t.query("stragglers").to_dicts()
        offsets = dict(t.rows("SELECT rank, clock_offset_ns FROM traces"))
        notes = t.query("rank_notes").to_dicts()
    assert len(rows) == 4 * truth.collectives_per_rank == 84
    assert {r["matched_on"] for r in rows} == {"peer and order"}
    assert all(r["peer"] == r["rank"] ^ 1 and r["ranks"] == 2 for r in rows)
    assert {(r["rank"], r["collective"]) for r in rows} == {(0, "send"), (1, "recv"), (2, "send"), (3, "recv")}
    assert all(r["rank"] == 3 for r in rows if r["last_arrival"] and r["wait_caused_ns"])
    assert stragglers[0]["rank"] == 3 and stragglers[0]["wait_caused_ns"] == truth.wait_caused_ns
    assert all(s["collectives"] == 21 and s["matched_on"] == "peer and order" for s in stragglers)
    # Rank 1 is aligned through its transfers with rank 0; the pair (2, 3) exchanges nothing with them.
    assert offsets == {0: 0, 1: OFFSETS[1], 2: None, 3: None}
    clock = [(n["rank"], n["note"]) for n in notes if n["topic"] == "clock"]
    assert clock == [
        (r, f"rank {r}'s clock is not aligned (clock_offset_ns NULL, start_ns NULL): none of its 21 communication "
         "kernels was found on an aligned rank (other process groups, or profiling windows that do not overlap)")
        for r in (2, 3)
    ]  # fmt: skip


def test_sendrecv_kernels_without_arguments_match_in_a_two_rank_job(source, tmp_path):
    # Only the kernel name says what the kernels are (no peer, no Seq): in a job of two ranks the peer is the other.
    truth = make_job(source, tmp_path / "job", ranks=2, offsets_ns=OFFSETS, late_rank=1, p2p="bare")
    with _load(tmp_path / "job") as t:
        rows = t.query("matched_collectives").to_dicts()
        stragglers = t.query("stragglers").to_dicts()
        offsets = dict(t.rows("SELECT rank, clock_offset_ns FROM traces"))
        assert t.query("rank_notes").to_dicts() == []
    assert len(rows) == 42 and {r["collective"] for r in rows} == {"sendrecv"}
    assert {(r["rank"], r["peer"], r["matched_on"]) for r in rows} == {
        (0, 1, "peer and order"),
        (1, 0, "peer and order"),
    }
    assert [(s["rank"], s["wait_caused_ns"]) for s in stragglers] == [(1, truth.wait_caused_ns), (0, 0)]
    assert offsets == {0: 0, 1: OFFSETS[1]}


@pytest.mark.slow  # the notes of a real rank alone (below) run every time
def test_what_could_not_be_matched_is_said_in_notes(source, tmp_path):
    # Two ranks of a 128-rank job, SendRecv kernels with no peer recorded: nothing can be matched or aligned.
    make_job(source, tmp_path / "job", ranks=2, offsets_ns=OFFSETS, late_rank=1, p2p="bare", world_size=128)
    result = CliRunner().invoke(cli, ["query", "stragglers", str(tmp_path / "job"), "-f", "csv", "--no-cache"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("Note: ")]
    assert notes == [
        "Note: job 4242: 2 of world_size 128 ranks present (0, 1): the cross-rank figures cover only these",
        "Note: rank 1's clock is not aligned (clock_offset_ns NULL, start_ns NULL): its 21 point-to-point kernels "
        "record no peer to align by (31.975 ms of communication)",
        'Note: rank 0: 21 point-to-point kernels not matched: no peer recorded (no "Dst Rank"/"Src Rank" or '
        '"Rank" args, and neither the group nor the job has two ranks) (46.876 ms of communication)',
        'Note: rank 1: 21 point-to-point kernels not matched: no peer recorded (no "Dst Rank"/"Src Rank" or '
        '"Rank" args, and neither the group nor the job has two ranks) (31.975 ms of communication)',
    ]
    assert result.stdout.splitlines()[0] == "trace,rank,collectives,last_arrivals,wait_caused_ns,matched_on"


def test_a_real_rank_alone_and_beside_a_rank_without_communication_is_explained(source, tmp_path):
    # HTA's rank 0 of 2 (NCCL), alone and beside HTA's rank 1 trace that holds no communication kernel.
    with tracekit.load(source) as t:
        alone = [(n["topic"], n["kernels"], n["note"]) for n in t.query("rank_notes").to_dicts()]
    assert alone == [
        ("ranks", None, "1 of world_size 2 ranks present (0): the cross-rank figures cover only these"),
        ("matching", 21, "rank 0: its 21 communication kernels matched nothing: no other rank of the job has "
         "communication kernels (it is the only trace loaded)"),
    ]  # fmt: skip
    folder = tmp_path / "two"
    folder.mkdir()
    for rel in ("hta/a100_nccl_rank0.json.gz", "hta/legacy_runtime_kernel_cats.json.gz"):
        (folder / rel.split("/")[1]).write_bytes((require_shared() / rel).read_bytes())
    with tracekit.load(folder) as t:
        notes = [(n["rank"], n["topic"], n["note"]) for n in t.query("rank_notes").to_dicts()]
        assert t.rows("SELECT rank, clock_offset_ns FROM traces ORDER BY rank") == [(0, 0), (1, None)]
    assert notes == [
        (1, "clock", "rank 1's clock is not aligned (clock_offset_ns NULL, start_ns NULL): its trace has no "
         "communication kernels to align by"),
        (0, "matching", "rank 0: its 21 communication kernels matched nothing: no other rank of the job has "
         "communication kernels"),
    ]  # fmt: skip
