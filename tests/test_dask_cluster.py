"""A real Dask cluster: a scheduler and workers started from the shell, as on an HPC allocation.

``dask scheduler`` and two ``dask worker`` processes run on localhost; ``load --dask
tcp://127.0.0.1:PORT`` and ``--dask file:SCHEDULER.json`` (the file dask-jobqueue and
dask-mpi write) load on them. A worker killed while it runs a task: the task runs again
on another and the dataset is the same. A task that kills every worker it runs on: the
load fails with one line and leaves nothing behind.

The inputs are four of the post's attention variants (tests/synthetic.py), tiny, so the
cost is the cluster's start-up and one load-and-link task per file.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from synthetic import post_variants

import tracekit
from tracekit.cli import main
from tracekit.store import dataset

pytest.importorskip("distributed")
DASK = Path(sys.executable).with_name("dask")
if not DASK.is_file():
    pytest.skip(f"no dask command beside {sys.executable}", allow_module_level=True)

VARIANTS = ["naive", "math", "flash", "cudnn"]
# Every column a one-process load writes, but which process parsed the file.
SAME = {
    "traces": "SELECT * EXCLUDE (loaded_on, path) FROM traces ORDER BY trace_id",
    "events": "SELECT count(*), sum(id), sum(ts_ns) FROM events",
    "stages": "SELECT * FROM cpu_stages ORDER BY ALL",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A scheduler and workers started as processes; stopped by their pids."""

    def __init__(self, folder: Path, env: dict | None = None):
        self.folder = folder
        self.port = _free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler_file = folder / "scheduler.json"
        self.env = {**os.environ, **(env or {})}
        self.procs: list[subprocess.Popen] = []
        self.log = open(folder / "cluster.log", "ab")
        self._start(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--no-dashboard",
            "--scheduler-file",
            str(self.scheduler_file),
        )

    def _start(self, *args: str, env: dict | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(
            [str(DASK), *args], cwd=self.folder, env={**self.env, **(env or {})}, stdout=self.log, stderr=self.log
        )
        self.procs.append(proc)
        return proc

    def worker(self, name: str, *extra: str, env: dict | None = None) -> subprocess.Popen:
        # No nanny: a worker killed stays dead (a nanny would start it again).
        return self._start(
            "worker",
            self.address,
            "--name",
            name,
            "--nthreads",
            "1",
            "--no-nanny",
            "--no-dashboard",
            "--local-directory",
            str(self.folder / name),
            *extra,
            env=env,
        )

    def wait_for(self, workers: int, timeout: float = 90) -> None:
        from dask.distributed import Client

        deadline = time.monotonic() + timeout
        while not self.scheduler_file.is_file():
            assert time.monotonic() < deadline, (self.folder / "cluster.log").read_text()
            time.sleep(0.1)
        with Client(self.address, timeout=timeout) as client:
            client.wait_for_workers(workers, timeout=max(1, deadline - time.monotonic()))

    def stop(self) -> None:
        # The workers first: a worker whose scheduler is gone spends seconds trying to reach it again.
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=2)  # a worker may take 10 s to close politely: nothing here needs it to
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ranks")
    for name, variant in post_variants(VARIANTS).items():
        variant.write(folder / f"{name}.json.gz")
    return folder


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler (with its scheduler file) and two workers, started from the shell on localhost."""
    c = Cluster(tmp_path_factory.mktemp("dask"))
    try:
        c.worker("w0")
        c.worker("w1")
        c.wait_for(2)
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def on_tcp(cluster, ranks, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tcp") / "ds"
    assert main(["load", str(ranks), "-o", str(out), "--parquet", "--dask", cluster.address, "-q"]) == 0
    return out


def _rows(source) -> dict[str, list]:
    with tracekit.load(source) as t:
        return {name: t.rows(sql) for name, sql in SAME.items()}


def test_a_dataset_loads_on_workers_started_from_the_shell(on_tcp, cluster):
    """--dask tcp://: every task ran in one of the workers, and the dataset holds every trace, linked."""
    assert dataset.is_dataset(on_tcp)
    with tracekit.load(on_tcp) as t:
        assert t.linked
        loaded_on = {r[0] for r in t.rows("SELECT loaded_on FROM traces")}
        assert t.rows("SELECT trace FROM traces ORDER BY trace_id") == [(v,) for v in sorted(VARIANTS)]
        assert {r["trace"] for r in t.query("attention_calls").to_dicts()} == set(VARIANTS)
    workers = {str(p.pid) for p in cluster.procs[1:]}
    assert loaded_on and {o.rsplit(":", 1)[1] for o in loaded_on} <= workers


@pytest.mark.slow  # a second load, in this process
def test_the_rows_are_those_of_a_one_process_load(on_tcp, ranks, tmp_path):
    assert main(["load", str(ranks), "-o", str(tmp_path / "one"), "--parquet", "--jobs", "1", "-q"]) == 0
    assert _rows(on_tcp) == _rows(tmp_path / "one")


@pytest.mark.slow  # a second load on the same cluster; the tcp test above keeps the cluster in every run
def test_a_scheduler_file_names_the_cluster(cluster, ranks, on_tcp, tmp_path, capsys):
    """--dask file:PATH (dask-jobqueue, dask-mpi): a .duckdb this time, the same rows as the dataset."""
    out = tmp_path / "run.duckdb"
    assert main(["load", str(ranks), "-o", str(out), "--dask", f"file:{cluster.scheduler_file}", "--link"]) == 0
    assert _rows(out) == _rows(on_tcp)
    missing = tmp_path / "nowhere.json"
    assert main(["load", str(ranks), "-o", str(tmp_path / "x"), "--parquet", "--dask", f"file:{missing}"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"Error: {missing}: no such Dask scheduler file (--dask file:{missing})"
    )
    assert not (tmp_path / "x").exists()


VICTIM = """
import os, pathlib, time
from tracekit.store import dataset

def stall(*args, **kwargs):  # the first task this worker takes never ends: it is killed in it
    pathlib.Path(os.environ["TK_VICTIM_MARK"]).write_text(str(os.getpid()))
    time.sleep(600)

dataset.load_parts_parquet = stall
"""


@pytest.mark.slow  # a third worker, killed mid-load, and a second load
def test_a_worker_killed_mid_load_has_its_tasks_rerun(cluster, ranks, on_tcp, tmp_path):
    (tmp_path / "victim.py").write_text(VICTIM)
    mark = tmp_path / "victim.started"
    victim = cluster.worker("victim", "--preload", str(tmp_path / "victim.py"), env={"TK_VICTIM_MARK": str(mark)})
    cluster.wait_for(3)
    out = tmp_path / "ds"
    load = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "load", str(ranks), "-o", str(out), "--parquet", "--dask", cluster.address],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not mark.is_file():
            assert load.poll() is None, load.communicate()
            assert time.monotonic() < deadline, "the victim never took a task"
            time.sleep(0.1)
        os.kill(victim.pid, signal.SIGKILL)  # in the middle of its task
        victim.wait()
        stdout, stderr = load.communicate(timeout=300)
    finally:
        if load.poll() is None:
            load.kill()
            load.wait()
    assert load.returncode == 0, stderr
    assert _rows(out) == _rows(on_tcp)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in on_tcp.iterdir())


SUICIDE = """
import os
from tracekit.store import dataset

def die(*args, **kwargs):  # every task kills the worker running it
    os._exit(1)

dataset.load_parts_parquet = die
"""


@pytest.mark.slow  # a cluster of its own
def test_a_load_that_cannot_finish_leaves_nothing(ranks, tmp_path, capsys):
    # The scheduler gives up on a task at the first worker it kills (allowed-failures 0).
    c = Cluster(tmp_path, env={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"})
    try:
        (tmp_path / "suicide.py").write_text(SUICIDE)
        c.worker("doomed", "--preload", str(tmp_path / "suicide.py"))
        c.worker("doomed2", "--preload", str(tmp_path / "suicide.py"))
        c.wait_for(2)
        out = tmp_path / "ds"
        assert main(["load", str(ranks), "-o", str(out), "--parquet", "--dask", c.address, "-q"]) == 1
    finally:
        c.stop()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"Error: the Dask cluster at {c.address} could not finish the load (KilledWorker: ")
    assert err[-1].endswith("nothing was written")
    assert not out.exists()


def test_the_dashboard_address_is_the_schedulers_when_it_serves_one():
    class Scheduler:
        address = "tcp://10.1.2.3:8786"

    class Client:
        scheduler = Scheduler()

        def __init__(self, services):
            self.services = services

        def scheduler_info(self):
            return {"services": self.services}

    assert dataset.dashboard(Client({"dashboard": 8787})) == "http://10.1.2.3:8787/status"
    assert dataset.dashboard(Client({})) is None
